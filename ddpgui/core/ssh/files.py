"""The file primitives of SSH hosts: over SFTP, or over exec channels where the host offers no SFTP.

Rental gateways, minimal containers and dropbear often have no SFTP subsystem.
There, every file primitive runs a short ``python -c`` snippet with the
profile's Python (it is there before the runner is): the data travels over the
channel's stdin or stdout, never in argv; a write goes to a temp file in the
same directory, is checked against the sha256 computed here and renamed into
place with the mode asked for; a read is checked against the sha256 the host
computed.  A snippet's own failures come back as one marked JSON line on
stderr, so an ``OSError`` here carries the host's errno (a missing file raises
``FileNotFoundError``, as over SFTP).
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import secrets as token

import paramiko

from ..targets.base import CommandResult, Target, TargetError

#: What the probe and ``hosts test`` say about a host without SFTP.
NO_SFTP_NOTE = "SFTP not offered: using exec-channel transfers"
_MARK = "ddpgui-exec-file:"
#: Seconds a transfer may take: a floor plus this many seconds per byte (50 kB/s at worst).
_TIMEOUT_S, _S_PER_BYTE = 60.0, 1 / 50_000

_FAIL = ("def fail(e):\n"
         " sys.stderr.write(" + repr(_MARK) + "+json.dumps({'errno':e.errno or 0,'error':e.strerror or str(e),"
         "'path':e.filename or ''})+'\\n')\n"
         " sys.exit(3)\n")

_WRITE = ("import hashlib,json,os,sys\n" + _FAIL +
          "def put(h,src):\n"
          " path,mode,left=h['path'],h['mode'],h['size']\n"
          " d=os.path.dirname(path) or '.'\n"
          " missing=[]\n"
          " while h['parents'] and not os.path.isdir(d):\n"
          "  missing.append(d)\n"
          "  d=os.path.dirname(d)\n"
          " for m in reversed(missing):\n"
          "  os.mkdir(m,0o700)\n"
          " tmp=os.path.join(os.path.dirname(path) or '.','.tmp-'+h['tag'])\n"
          " fd=os.open(tmp,os.O_WRONLY|os.O_CREAT|os.O_EXCL,0o600)\n"
          " sha=hashlib.sha256()\n"
          " try:\n"
          "  with os.fdopen(fd,'wb') as f:\n"
          "   while left:\n"
          "    b=src.read(min(left,1<<16))\n"
          "    if not b:\n"
          "     raise OSError(0,'the data stream ended early',path)\n"
          "    left-=len(b)\n"
          "    sha.update(b)\n"
          "    f.write(b)\n"
          "   f.flush()\n"
          "   os.fchmod(f.fileno(),mode)\n"
          "  if sha.hexdigest()!=h['sha256']:\n"
          "   raise OSError(0,'the data that arrived does not match its sha256',path)\n"
          "  os.replace(tmp,path)\n"
          " except BaseException:\n"
          "  try:\n"
          "   os.unlink(tmp)\n"
          "  except OSError:\n"
          "   pass\n"
          "  raise\n"
          "src=sys.stdin.buffer\n"
          "while True:\n"
          " line=src.readline()\n"
          " if not line:\n"
          "  break\n"
          " try:\n"
          "  put(json.loads(line.decode('utf-8')),src)\n"
          " except OSError as e:\n"
          "  fail(e)\n")

_READ = ("import hashlib,json,os,sys\n" + _FAIL +
         "h=hashlib.sha256()\n"
         "n=0\n"
         "try:\n"
         " with open(sys.argv[1],'rb') as f:\n"
         "  while True:\n"
         "   b=f.read(1<<16)\n"
         "   if not b:\n"
         "    break\n"
         "   h.update(b)\n"
         "   n+=len(b)\n"
         "   sys.stdout.buffer.write(b)\n"
         "except OSError as e:\n"
         " fail(e)\n"
         "sys.stdout.buffer.flush()\n"
         "sys.stderr.write(" + repr(_MARK) + "+json.dumps({'sha256':h.hexdigest(),'size':n})+'\\n')\n")

_MAKEDIRS = ("import json,os,sys\n" + _FAIL +
             "path,mode=os.path.normpath(sys.argv[1]),int(sys.argv[2],8)\n"
             "missing=[]\n"
             "current=path\n"
             "while not os.path.isdir(current):\n"
             " missing.append(current)\n"
             " parent=os.path.dirname(current)\n"
             " if parent==current:\n"
             "  break\n"
             " current=parent\n"
             "try:\n"
             " for d in reversed(missing):\n"
             "  os.mkdir(d,mode)\n"
             " os.chmod(path,mode)\n"
             "except OSError as e:\n"
             " fail(e)\n")


# ---- over SFTP ---------------------------------------------------------------------------------
def sftp_write(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int) -> None:
    tmp = posixpath.join(posixpath.dirname(path), f".tmp-{token.token_hex(8)}")
    try:
        with sftp.open(tmp, "wb") as fh:
            fh.chmod(mode)
            fh.set_pipelined(True)
            fh.write(data)
        sftp.posix_rename(tmp, path)
    except BaseException:
        try:
            sftp.remove(tmp)
        except (OSError, paramiko.SSHException, EOFError):
            pass
        raise


def sftp_read(sftp: paramiko.SFTPClient, path: str) -> bytes:
    with sftp.open(path, "rb") as fh:
        fh.prefetch()
        return fh.read()


def sftp_makedirs(sftp: paramiko.SFTPClient, path: str, mode: int) -> None:
    missing = []
    current = posixpath.normpath(path)
    while True:
        try:
            sftp.stat(current)
            break
        except FileNotFoundError:
            missing.append(current)
            parent = posixpath.dirname(current)
            if parent == current:
                break
            current = parent
    for directory in reversed(missing):
        sftp.mkdir(directory, mode)
    sftp.chmod(path, mode)


# ---- over exec channels ------------------------------------------------------------------------
def _marked(result: CommandResult) -> dict | None:
    for line in reversed(result.stderr.decode("utf-8", "replace").splitlines()):
        if line.startswith(_MARK):
            try:
                return json.loads(line[len(_MARK):])
            except ValueError:
                return None
    return None


def _run(target: Target, what: str, snippet: str, args: list[str], stdin: bytes | None = None,
         size: int = 0) -> tuple[CommandResult, dict | None]:
    """Run ``snippet`` with the profile's Python; a failure of the snippet's own raises OSError."""
    result = target.exec(target.python_snippet(snippet, *args), stdin=stdin, timeout=_TIMEOUT_S + size * _S_PER_BYTE)
    marked = _marked(result)
    if result.rc == 0:
        return result, marked
    if marked is not None and marked.get("errno") == 0:
        raise TargetError(f"{what} on {target.name} over an exec channel failed: {marked['error']}",
                          "try again; check the free disk space on the host")
    if marked is not None and "errno" in marked:
        raise OSError(marked["errno"], f"{marked['error']} ({what} on {target.name} over an exec channel)",
                      marked.get("path") or None)
    cause = target.python_error(result)
    if cause.failure == "python_too_old":
        raise cause
    raise TargetError(f"{target.name} offers no SFTP, and the exec-channel transfer that replaces it failed while "
                      f"{what}: {cause.args[0]}",
                      f"{cause.hint}; or ask the host's admin to enable SFTP (a 'Subsystem sftp' line in "
                      "sshd_config)", field=cause.field)


def exec_write(target: Target, files: list[tuple[str, bytes, int]], parents: bool = False) -> None:
    """Write each ``(path, data, mode)`` through one exec channel: a JSON header line, then the bytes, per file;
    ``parents``: make missing parent directories (0700) as well."""
    stream = bytearray()
    for path, data, mode in files:
        header = {"path": path, "mode": mode, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                  "tag": token.token_hex(8), "parents": parents}
        stream += json.dumps(header).encode() + b"\n"
        stream += data
    what = f"writing {files[0][0]}" + (f" and {len(files) - 1} more files" if len(files) > 1 else "")
    _run(target, what, _WRITE, [], stdin=bytes(stream), size=len(stream))


def exec_read(target: Target, path: str) -> bytes:
    result, marked = _run(target, f"reading {path}", _READ, [path])
    data = result.stdout
    if marked is None or marked.get("sha256") != hashlib.sha256(data).hexdigest():
        raise TargetError(f"reading {target.name}:{path} over an exec channel gave {len(data)} bytes that do not "
                          f"match the file's sha256 on the host", "try again (the file may have changed while it was read)")
    return data


def exec_makedirs(target: Target, path: str, mode: int) -> None:
    _run(target, f"creating {path}", _MAKEDIRS, [path, f"{mode:o}"])
