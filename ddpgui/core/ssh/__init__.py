"""SSH: host keys the way OpenSSH checks them, key files, logging in, the connection and its files."""
