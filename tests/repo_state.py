"""What a test compares before and after an attack or an undo: a folder's files, byte for byte."""
import os


def tree_state(d):
    """{path: (kind, content, exec bit)} for everything under d except .git."""
    out = {}
    for dirpath, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if x != ".git"]
        rel_dir = os.path.relpath(dirpath, d)
        if rel_dir != "." and not dirs and not files:
            out[rel_dir] = ("emptydir",)
        for name in files + [x for x in dirs if os.path.islink(os.path.join(dirpath, x))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", f.read(), bool(os.stat(p).st_mode & 0o100))
    return out
