"""A real run store file with a damaged page, as a failing disk leaves it (SQLite finds it malformed)."""
import sqlite3


def damage(path, table):
    """Overwrite the head of ``table``'s b-tree root page (page_size * (root - 1) bytes into the file)."""
    conn = sqlite3.connect(path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek(size * (root - 1))
        fh.write(b"\xff" * 64)
