"""`make bench`: the measured goals of each issue, printed as one table."""
