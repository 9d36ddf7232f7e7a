"""Deterministic evidence: do the legacy step and its linen port compile to
the same program?

Timings on a shared machine are noisy; the programs are not.  Identical
programs cost the same, so where the lowered StableHLO of the two train steps
is the same text (up to the order of the arguments and source locations),
any measured difference in step time is noise or Python dispatch.  Where the
texts differ, the differing operations are listed, together with XLA's cost
model (flops, bytes accessed) and buffer sizes of the compiled programs.
"""

import collections
import re


_LOC = re.compile(r'loc\((?:[^()]|\([^()]*\))*\)')
_OP = re.compile(r'(?:^|= |\s)"?((?:stablehlo|chlo|mhlo|func|sdy)\.[a-z_]+)')


def canonical_stablehlo(text):
  """The module's text without source locations, module name and the
  signature of ``main`` (whose result names say ``target.params`` in one
  program and ``params`` in the other).  Compare programs lowered from
  ``models.flat_step``, which gives both steps the same argument order."""
  text = _LOC.sub('', text)
  lines = []
  for line in text.splitlines():
    line = line.strip()
    if (not line or line.startswith('#loc') or line.startswith('module @')
        or line.startswith('func.func public @main(')):
      continue
    lines.append(line)
  return '\n'.join(lines)


def op_counts(stablehlo_text):
  """How often each StableHLO/CHLO operation occurs in ``main``."""
  counts = collections.Counter()
  for line in canonical_stablehlo(stablehlo_text).splitlines():
    match = _OP.search(line)
    if match and match.group(1) not in ('func.return', 'func.call'):
      counts[match.group(1).split('.', 1)[1]] += 1
  return counts


def _count_diff(legacy, linen):
  """'linen +20 maximum, -80 reshape' style summary of op-count changes."""
  parts = []
  for op in sorted(set(legacy) | set(linen)):
    delta = linen[op] - legacy[op]
    if delta:
      parts.append(f'{delta:+d} {op}')
  return ', '.join(parts)


def _cost(compiled):
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
    cost = cost[0] if cost else {}
  cost = cost or {}
  memory = compiled.memory_analysis()
  out = {'flops': cost.get('flops'),
         'bytes_accessed': cost.get('bytes accessed'),
         'transcendentals': cost.get('transcendentals')}
  for field in ('temp_size_in_bytes', 'argument_size_in_bytes',
                'output_size_in_bytes'):
    out[field.replace('_size_in_bytes', '_bytes')] = getattr(
        memory, field, None) if memory is not None else None
  return out


def compare(name, legacy, linen):
  """Compares two models' programs: for each variant a pair ``(lowered,
  compiled)``, ``lowered`` from ``models.flat_step`` (same argument order in
  both), ``compiled`` the real step's (for XLA's cost model; None to skip).
  """
  texts = {}
  row = {'program': name}
  for variant, (lowered, compiled) in (('legacy', legacy), ('linen', linen)):
    text = lowered.as_text()
    texts[variant] = text
    row[variant] = {'stablehlo_ops': sum(op_counts(text).values()),
                    **(_cost(compiled) if compiled is not None else {})}
  same = (canonical_stablehlo(texts['legacy']) ==
          canonical_stablehlo(texts['linen']))
  row['identical_stablehlo'] = same
  row['op_diff'] = '' if same else _count_diff(op_counts(texts['legacy']),
                                                op_counts(texts['linen']))
  return row


def print_table(rows, out):
  print('\nprograms (deterministic; legacy vs linen+optax):', file=out)
  print(f'{"program":22} {"stablehlo ops":>15} {"identical":>9} '
        f'{"MFLOP (XLA cost)":>21} {"MB accessed":>17} {"temp MB":>15}',
        file=out)

  def pair(row, key, scale, fmt):
    values = [row[v].get(key) for v in ('legacy', 'linen')]
    if any(v is None for v in values):
      return '-'
    return '/'.join(format(v * scale, fmt) for v in values)

  for row in rows:
    print(f'{row["program"]:22} '
          f'{pair(row, "stablehlo_ops", 1, "d"):>15} '
          f'{"yes" if row["identical_stablehlo"] else "no":>9} '
          f'{pair(row, "flops", 1e-6, ".5g"):>21} '
          f'{pair(row, "bytes_accessed", 1e-6, ".4g"):>17} '
          f'{pair(row, "temp_bytes", 1e-6, ".4g"):>15}', file=out)
    if row['op_diff']:
      print(f'{"":22} linen vs legacy ops: {row["op_diff"]}', file=out)
