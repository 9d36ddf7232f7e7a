"""Stand-in: the gfile names on the local file system."""
import glob as _glob
import os as _os
import shutil as _shutil

exists = _os.path.exists
glob = _glob.glob
makedirs = lambda p: _os.makedirs(p, exist_ok=True)
remove = _os.remove
rmtree = _shutil.rmtree
isdir = _os.path.isdir
listdir = _os.listdir
GFile = open


def rename(src, dst, overwrite=False):
  if _os.path.exists(dst) and not overwrite:
    raise FileExistsError(dst)
  _os.replace(src, dst)
