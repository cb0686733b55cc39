"""The packaged runner: probe a host, launch and supervise a DDP run, stream its spools.

Standard library and torch only (nvidia-ml-py when present); Python 3.9 syntax.
It never imports ddpgui: the two meet only through the file protocol in
docs/PROTOCOL.md.
"""
__version__ = "0.1.0"
