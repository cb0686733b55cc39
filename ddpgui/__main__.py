"""``python -m ddpgui`` / ``ddpgui``: the command line (the desktop app when it is given no command)."""
import sys


def main() -> int:
    from .cli import main as cli_main

    return cli_main(sys.argv[1:] or ["--help"])


if __name__ == "__main__":
    sys.exit(main())
