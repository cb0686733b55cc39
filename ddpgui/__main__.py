"""``python -m ddpgui`` / ``ddpgui``: the desktop app with no arguments, else the command line."""
import sys


def main() -> int:
    if len(sys.argv) <= 1:
        from .ui.app import main as app_main

        return app_main()
    from .cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
