"""Compares two .npz files written by the unseen drivers.

Usage: python compare.py A.npz B.npz [--rtol 1e-5] [--atol 1e-6]
                          [--shapes-only REGEX]
Prints every key missing on one side and every array that differs beyond
the tolerance (max abs difference); exit status 1 if any.  Keys matching
``--shapes-only`` are compared by shape only: the initial parameters of an
upgraded (linen) model, which derives its parameter keys apart from legacy
Flax (docs/migration.md), so the same seed draws other numbers.
"""
import argparse
import re
import sys

import numpy as np


def main():
  p = argparse.ArgumentParser()
  p.add_argument('a')
  p.add_argument('b')
  p.add_argument('--rtol', type=float, default=1e-5)
  p.add_argument('--atol', type=float, default=1e-6)
  p.add_argument('--shapes-only', default=None)
  args = p.parse_args()
  a, b = np.load(args.a), np.load(args.b)
  bad = 0
  for k in sorted(set(a.files) ^ set(b.files)):
    print('only in', args.a if k in a.files else args.b, ':', k)
    bad += 1
  worst = 0.0
  for k in sorted(set(a.files) & set(b.files)):
    x, y = a[k], b[k]
    if x.shape != y.shape:
      print('shape', k, x.shape, y.shape)
      bad += 1
      continue
    if args.shapes_only and re.search(args.shapes_only, k):
      continue
    if x.dtype.kind in 'fc':
      ok = np.allclose(x, y, rtol=args.rtol, atol=args.atol, equal_nan=True)
      d = float(np.max(np.abs(x - y))) if x.size else 0.0
      worst = max(worst, d)
    else:
      ok = np.array_equal(x, y)
      d = None
    if not ok:
      print('differs', k, 'max abs diff', d)
      bad += 1
  print(f'{len(a.files)} vs {len(b.files)} arrays, {bad} differences, '
        f'largest abs difference {worst:.3g}')
  sys.exit(1 if bad else 0)


if __name__ == '__main__':
  main()
