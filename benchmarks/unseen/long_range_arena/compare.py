"""Compares two driver outputs: python compare.py REF.npz CAND.npz [rtol atol].

Parameter paths must match exactly (a leading 'params/' level, as linen
variables have it, is dropped); values to float32 rounding. Prints one line
per family and exits 1 on any difference.
"""
import collections
import sys

import numpy as np


def load(path):
  data = dict(np.load(path))
  status = dict(s.split('=', 1) for s in data.pop('__status__'))
  out = {}
  for k, v in data.items():
    fam, rest = k.split('/', 1)
    if rest.startswith(('init/params/', 'step2/params/')):
      head, tail = rest.split('/params/', 1)
      rest = head + '/' + tail
    out[(fam, rest)] = v
  return status, out


def main(argv):
  rtol = float(argv[3]) if len(argv) > 3 else 1e-5
  atol = float(argv[4]) if len(argv) > 4 else 1e-6
  rstat, ref = load(argv[1])
  cstat, cand = load(argv[2])
  fams = list(dict.fromkeys(list(rstat) + list(cstat)))
  bad = False
  for fam in fams:
    rs, cs = rstat.get(fam, 'absent'), cstat.get(fam, 'absent')
    if rs != 'ok' or cs != 'ok':
      print(f'{fam:24s} ref: {rs[:90]} | cand: {cs[:90]}')
      bad = bad or rs == 'ok'
      continue
    rk = {k for f, k in ref if f == fam}
    ck = {k for f, k in cand if f == fam}
    problems = []
    if rk != ck:
      problems.append(f'paths only in ref: {sorted(rk - ck)[:6]}, '
                      f'only in cand: {sorted(ck - rk)[:6]}')
    worst = collections.defaultdict(float)
    for k in sorted(rk & ck):
      a, b = ref[(fam, k)], cand[(fam, k)]
      if a.shape != b.shape:
        problems.append(f'{k}: shape {a.shape} vs {b.shape}')
        continue
      err = np.max(np.abs(a.astype(np.float64) - b) /
                   (atol + rtol * np.abs(a.astype(np.float64))), initial=0.0)
      group = k.split('/')[0]
      worst[group] = max(worst[group], err)
      if err > 1:
        problems.append(f'{k}: max |diff| {np.max(np.abs(a - b)):.3g}')
    summary = ' '.join(f'{g}={w:.2g}' for g, w in sorted(worst.items()))
    if problems:
      bad = True
      print(f'{fam:24s} DIFF ({len(problems)}): ' + '; '.join(problems[:4]))
    else:
      print(f'{fam:24s} same (worst err/tol: {summary})')
  return 1 if bad else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
