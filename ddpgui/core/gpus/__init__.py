"""A host's GPUs as the host monitor reports them (remote_runner monitor), and choosing GPUs for a run."""
