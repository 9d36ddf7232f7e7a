"""Did ``flaxlegacy upgrade`` keep every comment of a tree?

    python benchmarks/upgrade_comments.py SRC UPGRADED

SRC: the legacy tree as written; UPGRADED: what ``flaxlegacy upgrade SRC
--out UPGRADED`` wrote.  For every Python file in both, counts the comments
the tokenizer reads (source vs upgraded, by text): a comment of the source
missing from the upgraded file is lost.  The upgrade's own TODO comments
and the comments of files it adds do not count.  Prints each file with
lost comments and a total; exits 1 if any is lost.  docs/corpus.md reports
it over the corpus trees (thirteenth session).
"""

import argparse
import collections
import os
import sys
import tokenize


def comments_of(path):
  """The comments of a Python file, or None where it does not tokenize."""
  try:
    with open(path, 'rb') as f:
      return [t.string.strip() for t in tokenize.tokenize(f.readline)
              if t.type == tokenize.COMMENT]
  except (SyntaxError, tokenize.TokenError, UnicodeDecodeError):
    return None


def lost_comments(src, upgraded):
  """{relative path: {comment: how many lost}} over the files of both."""
  out = {}
  for dirpath, _, files in os.walk(src):
    for name in sorted(files):
      if not name.endswith('.py'):
        continue
      a = os.path.join(dirpath, name)
      rel = os.path.relpath(a, src)
      b = os.path.join(upgraded, rel)
      if not os.path.exists(b):
        continue
      before, after = comments_of(a), comments_of(b)
      if before is None or after is None:
        continue
      gone = collections.Counter(before) - collections.Counter(after)
      if gone:
        out[rel] = dict(gone)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('src')
  parser.add_argument('upgraded')
  args = parser.parse_args(argv)
  lost = lost_comments(args.src, args.upgraded)
  for rel, gone in sorted(lost.items()):
    print(f'{rel}: {gone}')
  total = sum(sum(g.values()) for g in lost.values())
  print(f'comments lost: {total} in {len(lost)} files')
  return 1 if total else 0


if __name__ == '__main__':
  sys.exit(main())
