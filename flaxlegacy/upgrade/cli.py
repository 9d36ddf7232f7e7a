"""``flaxlegacy upgrade SRC... (--out DST | --in-place | --diff) [--verify]
[--names legacy|linen] [--observe CMD]``."""

import sys

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import report as report_lib


def add_arguments(parser):
  parser.add_argument('src', nargs='+', help='files or directories to upgrade')
  mode = parser.add_mutually_exclusive_group(required=True)
  mode.add_argument('--out', metavar='DST',
                    help='write the upgraded tree here (mirrors SRC; files '
                    'that are not Python are copied) with DST/upgrade.json; '
                    'several SRC each go under their own name (DST/pkg, '
                    'DST/tests), as cp -r puts them')
  mode.add_argument('--in-place', action='store_true',
                    help='rewrite the files of SRC themselves')
  mode.add_argument('--diff', action='store_true',
                    help='print unified diffs, write nothing; exit 1 if '
                    'anything would change')
  parser.add_argument('--verify', action='store_true',
                      help='check every upgraded module class whose input '
                      'shapes appear in an init_by_shape call against the '
                      'legacy one (FLAXLEGACY=off subprocess)')
  parser.add_argument('--verify-with', metavar='CMD',
                      help='run CMD (the codebase\'s tests) under the layer, '
                      'recording every module class it initialises (input '
                      'shapes, hyper-parameters), then check each upgraded '
                      'class against the legacy one at those shapes '
                      '(needs --out and one SRC directory)')
  parser.add_argument('--observe', metavar='CMD',
                      help='first run CMD (the codebase\'s tests, e.g. '
                      '"python -m pytest tests/") under the layer and record '
                      'which legacy classes and objects reach each call; '
                      'they stand in for what the source cannot tell, and a '
                      'run the source contradicts leaves a TODO')
  parser.add_argument('--names', choices=('legacy', 'linen'),
                      default='legacy',
                      help='submodule names: legacy (default: name= where '
                      "linen's auto-name differs, so legacy checkpoints load "
                      "unchanged) or linen (linen's own names where known, "
                      'and a rename map in upgrade.json for '
                      'flaxlegacy convert --rename-map)')


def run(args):
  if args.verify_with and (not args.out or len(args.src) != 1):
    sys.stderr.write('flaxlegacy upgrade: --verify-with needs --out and one '
                     'SRC directory (the tree CMD runs in)\n')
    return 2
  if args.verify and not args.out:
    sys.stderr.write('flaxlegacy upgrade: --verify needs --out (it compares '
                     'the legacy SRC with the upgraded DST)\n')
    return 2
  if args.names == 'linen' and args.in_place:
    sys.stderr.write('flaxlegacy upgrade: --names linen needs --out or --diff '
                     '(the rename map a legacy checkpoint needs goes to '
                     'DST/upgrade.json)\n')
    return 2
  try:
    status, report = api.upgrade_paths(
        args.src, out=args.out, in_place=args.in_place, diff=args.diff,
        verify=args.verify, stdout=sys.stdout, names=args.names,
        observe=args.observe, verify_with=args.verify_with)
  except (FileNotFoundError, ValueError) as e:
    sys.stderr.write(f'{e}\n')
    return 2
  sys.stderr.write(report_lib.summary_text(report))
  return status
