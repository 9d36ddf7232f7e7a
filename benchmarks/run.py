"""flaxlegacy vs linen + optax: the same models, one process, interleaved.

    python benchmarks/run.py                 # CPU-sized defaults
    python benchmarks/run.py --size tiny     # smoke test (seconds)
    python benchmarks/run.py --only train_step,compile --json out.json

Each benchmark builds the legacy program (``from flax import nn, optim``
under flaxlegacy) and its linen + optax port, warms both up, then alternates
them repetition by repetition (ABBA order) and reports medians, the ratio
flaxlegacy / linen+optax of the medians, and the interquartile range of the
per-repetition ratios (each legacy repetition over the linen repetition next
to it, which cancels slow drift of a shared machine's load).

Clocks: on a CPU backend the primary clock is the process's CPU time (all
threads), which other processes' load disturbs far less than wall time; wall
time is recorded too (``wall ratio``).  On a GPU the primary clock is wall
time.  ``--clock`` overrides.

Memory (peak RSS) and the 8-device pmap step run in separate processes: peak
RSS is per process, and the device count is fixed when JAX starts.  The
``programs`` benchmark is deterministic evidence: it compares the lowered
StableHLO and XLA's cost model of the two train steps (``programs.py``).
On a GPU machine the ResNet benchmarks use ResNet-50 at 224x224.

Targets (ratios): train step <= 1.02, compile <= 1.10, init <= 1.20,
dispatch <= 1.05, memory <= 1.05, pmap step <= 1.02.
"""

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
  sys.path.insert(0, REPO)

import flaxlegacy  # noqa: E402  pylint: disable=g-import-not-at-top
flaxlegacy.activate()  # also where the start-up .pth is not installed

import jax  # noqa: E402  pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # noqa: E402  pylint: disable=g-import-not-at-top

from benchmarks import models  # noqa: E402  pylint: disable=g-import-not-at-top
from benchmarks import programs  # noqa: E402  pylint: disable=g-import-not-at-top

TARGETS = {'train_step': 1.02, 'compile': 1.10, 'init': 1.20,
           'dispatch': 1.05, 'memory': 1.05, 'pmap_step': 1.02}

SIZES = {
    'tiny': dict(cnn_batch=8, resnet='resnet_tiny', image=8, width=4,
                 resnet_batch=2, reps=3, steps=1, compile_reps=1,
                 init_reps=3, dispatch_calls=10, dispatch_reps=3,
                 memory_steps=2,
                 memory_reps=1, pmap_reps=2),
    'cpu': dict(cnn_batch=128, resnet='resnet18', image=32, width=32,
                resnet_batch=16, reps=21, steps=3, compile_reps=5,
                init_reps=15, dispatch_calls=200, dispatch_reps=41,
                memory_steps=10,
                memory_reps=3, pmap_reps=61),
    'gpu': dict(cnn_batch=128, resnet='resnet50', image=224, width=64,
                resnet_batch=64, reps=21, steps=20, compile_reps=5,
                init_reps=15, dispatch_calls=1000, dispatch_reps=41,
                memory_steps=20,
                memory_reps=3, pmap_reps=61),
}

# The dispatch benchmark's tree: a ResNet-50's parameters (161 leaves; the
# Optimizer adds as many momentum traces and a step), each shrunk to 2
# floats so that the step's arithmetic is negligible next to its dispatch.
DISPATCH_RESNET = dict(name='resnet50', image_size=8, num_filters=4)

CLOCK = {'name': 'cpu'}


def block(tree):
  jax.tree_util.tree_map(
      lambda x: x.block_until_ready() if hasattr(x, 'block_until_ready')
      else x, tree)
  return tree


# --- timing ------------------------------------------------------------------


def interleaved(fns, reps):
  """Runs each fn once per repetition, in ABBA order; returns, per fn,
  ``{'wall': [...], 'cpu': [...]}`` seconds."""
  times = {name: {'wall': [], 'cpu': []} for name in fns}
  names = list(fns)
  for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    for name in order:
      gc.collect()  # a collection triggered inside one timing is noise
      wall, cpu = time.perf_counter(), time.process_time()
      fns[name]()
      times[name]['cpu'].append(time.process_time() - cpu)
      times[name]['wall'].append(time.perf_counter() - wall)
  return times


def _quartiles(values):
  if len(values) < 2:
    return values[0], values[0]
  q = statistics.quantiles(values, n=4, method='inclusive')
  return q[0], q[2]


def _verdict(ratio, q1, q3, target):
  if target is None:
    return '-'
  if ratio <= target:
    return 'yes'
  # The median misses, but a quarter or more of the paired repetitions meet
  # the target: not distinguishable from noise at this many repetitions.
  return 'noise' if q1 <= target else 'NO'


def result(name, what, times, unit='ms', scale=1e3, per=1, target='auto',
           clock=None):
  """A table row from ``interleaved`` times (seconds) of legacy and linen."""
  clock = clock or CLOCK['name']
  if target == 'auto':
    target = TARGETS[name.split(':')[0]]
  med = {v: statistics.median(times[v][clock]) / per * scale
         for v in ('legacy', 'linen')}
  paired = [a / b for a, b in zip(times['legacy'][clock],
                                  times['linen'][clock]) if b > 0]
  q1, q3 = _quartiles(paired or [math.nan])
  wall = {v: statistics.median(times[v]['wall']) for v in ('legacy', 'linen')}
  ratio = med['legacy'] / med['linen']
  return {'benchmark': name, 'what': what, 'unit': unit, 'clock': clock,
          'legacy': med['legacy'], 'linen': med['linen'], 'ratio': ratio,
          'ratio_q1': q1, 'ratio_q3': q3,
          'wall_ratio': wall['legacy'] / wall['linen'],
          'reps': len(times['legacy'][clock]), 'target': target,
          'ok': _verdict(ratio, q1, q3, target),
          'samples': {v: [t / per * scale for t in times[v][clock]]
                      for v in ('legacy', 'linen')}}


def value_result(name, what, values, unit, target='auto'):
  """A table row from measured values (not times), e.g. peak memory."""
  if target == 'auto':
    target = TARGETS[name.split(':')[0]]
  med = {v: statistics.median(values[v]) for v in ('legacy', 'linen')}
  paired = [a / b for a, b in zip(values['legacy'], values['linen'])]
  q1, q3 = _quartiles(paired)
  ratio = med['legacy'] / med['linen']
  return {'benchmark': name, 'what': what, 'unit': unit, 'clock': '-',
          'legacy': med['legacy'], 'linen': med['linen'], 'ratio': ratio,
          'ratio_q1': q1, 'ratio_q3': q3, 'wall_ratio': None,
          'reps': len(values['legacy']), 'target': target,
          'ok': _verdict(ratio, q1, q3, target), 'samples': values}


# --- benchmarks ----------------------------------------------------------------


def _builders(cfg):
  return {
      'cnn': lambda v: models.build_cnn(v, cfg['cnn_batch']),
      'resnet': lambda v: models.build_resnet(
          v, cfg['resnet_batch'], cfg['resnet'], cfg['image'], cfg['width']),
  }


def _model_label(model, cfg):
  if model == 'cnn':
    return f'MNIST CNN, batch {cfg["cnn_batch"]}'
  return (f'{cfg["resnet"]} width {cfg["width"]} at {cfg["image"]}x'
          f'{cfg["image"]}, batch {cfg["resnet_batch"]}')


def _stepper(step, state, batch, n):
  """A closure that runs ``n`` chained steps from the current state."""
  box = {'state': state}

  def run():
    s = box['state']
    for _ in range(n):
      out = step(*s, batch)
      s = out[:-1]  # every step returns (*new_state, loss)
    block(out)
    box['state'] = s
  return run


def bench_train_step(cfg):
  rows = []
  for model, build in _builders(cfg).items():
    fns = {}
    for variant in ('legacy', 'linen'):
      step, state, batch = build(variant)
      fns[variant] = _stepper(step, state, batch, cfg['steps'])
      fns[variant]()  # compile
      fns[variant]()  # warm up
    times = interleaved(fns, cfg['reps'])
    rows.append(result(f'train_step:{model}',
                       f'jitted train step, {_model_label(model, cfg)}',
                       times, per=cfg['steps']))
  return rows


def _compile_phases(step, state, batch):
  """(traced, lowered, compiled) and the CPU/wall seconds of each phase."""
  phases = {}
  wall, cpu = time.perf_counter(), time.process_time()
  traced = step.trace(*state, batch)
  phases['trace'] = (time.perf_counter() - wall, time.process_time() - cpu)
  wall, cpu = time.perf_counter(), time.process_time()
  lowered = traced.lower()
  phases['lower'] = (time.perf_counter() - wall, time.process_time() - cpu)
  wall, cpu = time.perf_counter(), time.process_time()
  compiled = lowered.compile()
  phases['xla'] = (time.perf_counter() - wall, time.process_time() - cpu)
  return (traced, lowered, compiled), phases


def bench_compile(cfg):
  """Trace + lower + XLA compile of the train step, from cold caches."""
  rows = []
  for model, build in _builders(cfg).items():
    built = {v: build(v) for v in ('legacy', 'linen')}
    phase_times = {v: {p: {'wall': [], 'cpu': []}
                       for p in ('trace', 'lower', 'xla')} for v in built}

    def compile_fn(variant, model=model, built=built,
                   phase_times=phase_times):
      step, state, batch = built[variant]

      def run():
        jax.clear_caches()  # also the jitted helpers traced inside the step
        _, phases = _compile_phases(step, state, batch)
        for phase, (wall, cpu) in phases.items():
          phase_times[variant][phase]['wall'].append(wall)
          phase_times[variant][phase]['cpu'].append(cpu)
      return run
    fns = {v: compile_fn(v) for v in built}
    times = interleaved(fns, cfg['compile_reps'])
    rows.append(result(f'compile:{model}', 'trace + lower + compile, '
                       f'{_model_label(model, cfg)}', times))
    for phase in ('trace', 'xla'):
      rows.append(result(
          f'compile:{model} ({phase} only)',
          f'{phase} phase of the above (informational)',
          {v: phase_times[v][phase] for v in built}, target=None))
  return rows


def bench_programs(cfg):
  """Deterministic: lowered StableHLO and XLA cost of the two steps, both
  written as functions of the same flat arguments (``models.flat_step``).
  Returns rows of the programs table, not timing rows."""
  rows = []
  for model, build in _builders(cfg).items():
    programs_ = {}
    for variant in ('legacy', 'linen'):
      step, state, batch = build(variant)
      fn, args = models.flat_step(variant, step, state, batch)
      lowered = jax.jit(fn).lower(*args)
      programs_[variant] = (lowered, lowered.compile())
    rows.append(programs.compare(model, programs_['legacy'],
                                 programs_['linen']))
    if model == 'cnn':
      # The legacy program after `flaxlegacy upgrade` (in the legacy
      # column) against the hand-written linen + optax step.
      step, state, batch = build('upgraded')
      fn, args = models.flat_step('upgraded', step, state, batch)
      lowered = jax.jit(fn).lower(*args)
      rows.append(programs.compare('cnn:upgraded', (
          lowered, lowered.compile()), programs_['linen']))
  return rows


def bench_init(cfg):
  key = jax.random.PRNGKey(0)
  cnn_shape = (1, 28, 28, 1)
  image = cfg['image']
  res_shape = (1, image, image, 3)
  res_kwargs = models.resnet_kwargs(cfg['resnet'], image <= 64, cfg['width'])
  legacy_resnet = models.LegacyResNet.partial(**res_kwargs)
  linen_resnet = models.LinenResNet(**res_kwargs)

  def legacy_cnn():
    block(models.LegacyCNN.init_by_shape(key, [(cnn_shape, jnp.float32)]))

  def linen_cnn():
    block(models.LinenCNN().init(key, jnp.ones(cnn_shape)))

  def legacy_cnn_create():
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      block(models.LegacyCNN.create_by_shape(key, [(cnn_shape, jnp.float32)]))

  def legacy_res():
    with models.nn.stateful() as state:
      out = legacy_resnet.init_by_shape(key, [(res_shape, jnp.float32)])
    block((out, state.as_dict()))

  def linen_res():
    block(linen_resnet.init(key, jnp.ones(res_shape)))

  rows = []
  for name, legacy, linen in (
      ('init:cnn init_by_shape', legacy_cnn, linen_cnn),
      ('init:cnn create_by_shape', legacy_cnn_create, linen_cnn),
      ('init:resnet init_by_shape', legacy_res, linen_res)):
    legacy()  # compiles the eager primitives both share
    linen()
    times = interleaved({'legacy': legacy, 'linen': linen}, cfg['init_reps'])
    what = name.split(':', 1)[1] + ' vs linen init (eager)'
    if 'resnet' in name:
      what += f', {cfg["resnet"]} width {cfg["width"]}'
    rows.append(result(name, what, times))
  return rows


def _dispatch_states():
  """An Optimizer and a TrainState over a ResNet-50's parameter tree of
  2-float leaves, and a gradient for each."""
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  tiny = lambda tree: jax.tree_util.tree_map(  # noqa: E731
      lambda s: jnp.full((2,), 0.5, s.dtype), tree)
  legacy_shapes, legacy_module = models.param_shapes(
      'legacy', **DISPATCH_RESNET)
  linen_shapes, _ = models.param_shapes('linen', **DISPATCH_RESNET)
  optimizer = models.legacy_optimizer(
      models.nn.Model(legacy_module, tiny(legacy_shapes)))
  state = train_state.TrainState.create(
      apply_fn=None, params=tiny(linen_shapes), tx=models.linen_tx())
  # Legacy takes the gradient with the target's structure (an nn.Model).
  return optimizer, optimizer.target, state, state.params


def bench_dispatch(cfg):
  """Per-step overhead of a jitted apply step on a ResNet-50-size tree."""
  optimizer, legacy_grads, state, linen_grads = _dispatch_states()
  n_legacy = len(jax.tree_util.tree_leaves(optimizer))
  n_linen = len(jax.tree_util.tree_leaves(state))
  legacy_step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  linen_step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  calls = cfg['dispatch_calls']
  box = {'legacy': optimizer, 'linen': state}

  def legacy():
    opt = box['legacy']
    for _ in range(calls):
      opt = legacy_step(opt, legacy_grads)
    block(opt)
    box['legacy'] = opt

  def linen():
    s = box['linen']
    for _ in range(calls):
      s = linen_step(s, linen_grads)
    block(s)
    box['linen'] = s

  legacy()
  linen()
  rows = [result('dispatch', f'jitted apply step, {n_legacy} vs {n_linen} '
                 'leaves (ResNet-50 tree; Optimizer vs TrainState)',
                 interleaved({'legacy': legacy, 'linen': linen},
                             cfg['dispatch_reps']),
                 unit='us', scale=1e6, per=calls)]

  # Where dispatch time goes in Python: flattening the state at the call and
  # unflattening the result.
  leaves = {'legacy': jax.tree_util.tree_flatten(box['legacy']),
            'linen': jax.tree_util.tree_flatten(box['linen'])}

  def round_trip(variant):
    obj = box[variant]
    flat, treedef = leaves[variant]

    def run():
      for _ in range(calls):
        jax.tree_util.tree_flatten(obj)
        treedef.unflatten(flat)
    return run
  rows.append(result(
      'dispatch:tree_flatten', 'tree_flatten + unflatten of the state '
      '(informational)', interleaved({v: round_trip(v) for v in box},
                                     cfg['reps']),
      unit='us', scale=1e6, per=calls, target=None))

  # Deterministic: Python function calls per dispatched step (the pytree
  # callbacks of custom nodes; the rest of dispatch is C++).
  import cProfile  # pylint: disable=g-import-not-at-top
  import pstats  # pylint: disable=g-import-not-at-top
  counts = {}
  for variant, step, grads in (('legacy', legacy_step, legacy_grads),
                               ('linen', linen_step, linen_grads)):
    s = box[variant]
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
      s = step(s, grads)
    profile.disable()
    box[variant] = block(s)
    counts[variant] = [pstats.Stats(profile).total_calls / calls]
  rows.append(value_result(
      'dispatch:python calls', 'Python function calls per step (cProfile; '
      'deterministic; informational)', counts, 'n', target=None))
  return rows


# --- child processes: memory, pmap -------------------------------------------


def _child(args, env_extra=None):
  env = dict(os.environ)
  env.update(env_extra or {})
  env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                        capture_output=True, text=True, env=env, timeout=3600)
  if proc.returncode != 0:
    raise RuntimeError(f'benchmark child {args} failed:\n{proc.stderr[-4000:]}')
  return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_memory(cfg, size):
  values = {'legacy': {}, 'linen': {}}
  for rep in range(cfg['memory_reps']):
    order = ('legacy', 'linen') if rep % 2 == 0 else ('linen', 'legacy')
    for variant in order:
      out = _child(['--_memory-child', variant, '--size', size,
                    '--clock', CLOCK['name']])
      for key, value in out.items():
        values[variant].setdefault(key, []).append(value)
  what = (f'{cfg["memory_steps"]} train steps of {_model_label("resnet", cfg)}'
          ' (one process each)')
  rows = [
      value_result('memory', 'peak RSS, ' + what,
                   {v: [kb / 1024 for kb in values[v]['peak_rss_kb']]
                    for v in values}, 'MiB'),
      value_result('memory:growth', 'peak RSS minus RSS after imports '
                   '(informational)',
                   {v: [kb / 1024 for kb in values[v]['growth_kb']]
                    for v in values}, 'MiB', target=None),
      value_result('memory:build', 'the same, after building model, params '
                   'and optimizer, before any step (informational)',
                   {v: [kb / 1024 for kb in values[v]['build_kb']]
                    for v in values}, 'MiB', target=None),
      value_result('memory:live arrays', 'bytes of live jax.Arrays after '
                   'the run (deterministic; informational)',
                   {v: [b / 2**20 for b in values[v]['live_bytes']]
                    for v in values}, 'MiB', target=None),
  ]
  if all(all(values[v].get('device_peak_bytes') or [None])
         for v in values):
    rows.append(value_result(
        'memory:device', 'peak device memory, ' + what,
        {v: [b / 2**20 for b in values[v]['device_peak_bytes']]
         for v in values}, 'MiB'))
  return rows


def _rss_kb(field):
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1])
  return 0


def _peak_rss_kb():
  # VmHWM, the high-water mark of this process's own address space.  Not
  # getrusage's ru_maxrss: Linux carries that across fork + exec, so every
  # child would report at least the parent's RSS at the fork (which is how
  # both variants once showed the very same peak).
  if os.path.exists('/proc/self/status'):
    return _rss_kb('VmHWM')
  import resource  # pylint: disable=g-import-not-at-top
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak // 1024 if sys.platform == 'darwin' else peak  # darwin: bytes


def memory_child(variant, cfg):
  base = _rss_kb('VmRSS') if os.path.exists('/proc/self/status') else 0
  step, state, batch = models.build_resnet(
      variant, cfg['resnet_batch'], cfg['resnet'], cfg['image'], cfg['width'])
  built = _peak_rss_kb()
  run = _stepper(step, state, batch, cfg['memory_steps'])
  run()
  peak = _peak_rss_kb()
  stats = jax.devices()[0].memory_stats() or {}
  gc.collect()
  live = sum(x.nbytes for x in jax.live_arrays())
  print(json.dumps({'peak_rss_kb': peak, 'growth_kb': peak - base,
                    'build_kb': built - base,
                    'live_bytes': live,
                    'device_peak_bytes': stats.get('peak_bytes_in_use')}))


def bench_pmap(cfg, size):
  """(timing rows, programs-table rows) of the 8-device pmap steps."""
  out = _child(['--_pmap-child', '--size', size, '--clock', CLOCK['name']], {
      'XLA_FLAGS': (os.environ.get('XLA_FLAGS', '') +
                    ' --xla_force_host_platform_device_count=8').strip(),
      'JAX_PLATFORMS': 'cpu'})
  return out['rows'], out['programs']


def pmap_child(cfg):
  """Data-parallel CNN step on 8 CPU devices, both legacy styles."""
  from flax import jax_utils  # pylint: disable=g-import-not-at-top
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  n = jax.local_device_count()
  per_device = max(1, cfg['cnn_batch'] // n)
  batch = models.make_batch(per_device * n, (28, 28, 1))
  batch = jax.tree_util.tree_map(
      lambda x: x.reshape((n, per_device) + x.shape[1:]), batch)
  key = jax.random.PRNGKey(0)
  _, params = models.LegacyCNN.init_by_shape(key, [((1, 28, 28, 1),
                                                    jnp.float32)])
  optimizer = models.legacy_optimizer(models.nn.Model(models.LegacyCNN,
                                                      params))
  module = models.LinenCNN()
  state = jax_utils.replicate(train_state.TrainState.create(
      apply_fn=module.apply, params=module.init(key, jnp.ones(
          (1, 28, 28, 1)))['params'], tx=models.linen_tx()))
  linen = _stepper(jax.pmap(models.linen_pmap_train_step, axis_name='batch'),
                   (state,), batch, 1)
  rows, program_rows = [], []

  def lowered(variant, step, state_args):
    fn, args = models.flat_step(variant, step, state_args, batch)
    low = jax.pmap(fn, axis_name='batch').lower(*args)
    return low, low.compile()
  linen_program = lowered('linen', models.linen_pmap_train_step, (state,))
  for name, what, step, opt in (
      ('pmap_step', 'jax_utils.replicate + lax.pmean (legacy ImageNet '
       'example)', models.legacy_pmap_train_step,
       jax_utils.replicate(optimizer)),
      ('pmap_step:replicate()', 'Optimizer.replicate(): mean inside '
       'apply_gradient', models.legacy_replicated_train_step,
       optimizer.replicate())):
    program_rows.append(programs.compare(
        'pmap cnn' + name[len('pmap_step'):],
        lowered('legacy', step, (opt,)), linen_program))
    fns = {'legacy': _stepper(jax.pmap(step, axis_name='batch'), (opt,),
                              batch, 1), 'linen': linen}
    for f in fns.values():
      f()
      f()
    times = interleaved(fns, cfg['pmap_reps'])
    rows.append(result(name, f'MNIST CNN step on {n} CPU devices, batch '
                       f'{per_device} each; {what}', times))
  print(json.dumps({'rows': rows, 'programs': program_rows}))


# Run order.  ``compile`` clears JAX's caches, so the benchmarks whose
# set-up runs eager primitives (each compiled at its first use) come before
# it.
BENCHMARKS = ('train_step', 'init', 'dispatch', 'compile', 'programs',
              'memory', 'pmap_step')


def machine():
  devices = jax.devices()
  info = {
      'date': time.strftime('%Y-%m-%d %H:%M %Z'),
      'platform': platform.platform(),
      'processor': platform.processor() or platform.machine(),
      'cpu_count': os.cpu_count(),
      'devices': f'{len(devices)} x {devices[0].device_kind}',
      'python': platform.python_version(),
      'jax': jax.__version__,
      'loadavg': os.getloadavg() if hasattr(os, 'getloadavg') else None,
  }
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          info['processor'] = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  import flax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  info['flax'] = flax.__version__
  info['optax'] = optax.__version__
  return info


def _fmt(value, unit):
  return f'{value:10.3f}{unit:>3}' if value < 1e5 else f'{value:10.0f}{unit:>3}'


def print_table(rows, out=sys.stdout):
  print(f'{"benchmark":30} {"flaxlegacy":>13} {"linen+optax":>13} '
        f'{"ratio":>6} {"paired IQR":>13} {"wall":>6} {"target":>6}  ok',
        file=out)
  for r in rows:
    target = '-' if r['target'] is None else f'{r["target"]:.2f}'
    wall = '-' if r['wall_ratio'] is None else f'{r["wall_ratio"]:.3f}'
    iqr = f'{r["ratio_q1"]:.3f}-{r["ratio_q3"]:.3f}'
    print(f'{r["benchmark"]:30} {_fmt(r["legacy"], r["unit"])} '
          f'{_fmt(r["linen"], r["unit"])} {r["ratio"]:6.3f} {iqr:>13} '
          f'{wall:>6} {target:>6}  {r["ok"]}', file=out)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--size', choices=sorted(SIZES), default=None,
                      help='problem sizes (default: gpu on a GPU, else cpu)')
  parser.add_argument('--only', default=','.join(BENCHMARKS),
                      help='comma-separated subset of ' + ', '.join(BENCHMARKS))
  parser.add_argument('--clock', choices=('cpu', 'wall'), default=None,
                      help='primary clock (default: cpu on a CPU backend, '
                      'wall on an accelerator)')
  parser.add_argument('--json', default=None, help='write results here')
  parser.add_argument('--dispatch-calls', type=int, default=None,
                      help="override the size's dispatch calls per repetition")
  parser.add_argument('--dispatch-reps', type=int, default=None,
                      help="override the size's dispatch repetitions")
  parser.add_argument('--_memory-child', dest='memory_child', default=None,
                      help=argparse.SUPPRESS)
  parser.add_argument('--_pmap-child', dest='pmap_child', action='store_true',
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  backend = jax.default_backend()
  size = args.size or ('gpu' if backend == 'gpu' else 'cpu')
  cfg = dict(SIZES[size])
  for key in ('dispatch_calls', 'dispatch_reps'):
    if getattr(args, key) is not None:
      if getattr(args, key) < 1:
        parser.error(f'--{key.replace("_", "-")} must be at least 1')
      cfg[key] = getattr(args, key)
  CLOCK['name'] = args.clock or ('cpu' if backend == 'cpu' else 'wall')
  if args.memory_child:
    return memory_child(args.memory_child, cfg)
  if args.pmap_child:
    return pmap_child(cfg)
  selected = [b for b in args.only.split(',') if b]
  unknown = sorted(set(selected) - set(BENCHMARKS))
  if unknown:
    parser.error(f'unknown benchmark(s): {", ".join(unknown)}')
  info = machine()
  rows, program_rows = [], []
  started = time.perf_counter()
  def dump():
    if args.json:
      with open(args.json, 'w') as f:
        json.dump({'machine': info, 'size': size, 'clock': CLOCK['name'],
                   'config': cfg, 'results': rows,
                   'programs': program_rows}, f, indent=1)

  for name in [b for b in BENCHMARKS if b in selected]:
    t0 = time.perf_counter()
    n_rows, n_programs = len(rows), len(program_rows)
    if name == 'memory':
      rows += bench_memory(cfg, size)
    elif name == 'pmap_step':
      timings, pmap_programs = bench_pmap(cfg, size)
      rows += timings
      program_rows += pmap_programs
    elif name == 'programs':
      program_rows += bench_programs(cfg)
    else:
      rows += globals()['bench_' + name](cfg)
    print(f'... {name} done ({time.perf_counter() - t0:.0f} s)',
          file=sys.stderr, flush=True)
    # each benchmark's rows as soon as it is done (a run cut short keeps
    # what it measured)
    if rows[n_rows:]:
      print_table(rows[n_rows:], out=sys.stderr)
    if program_rows[n_programs:]:
      programs.print_table(program_rows[n_programs:], sys.stderr)
    dump()
  info['loadavg_end'] = os.getloadavg() if hasattr(os, 'getloadavg') else None
  info['seconds'] = round(time.perf_counter() - started, 1)
  load = '/'.join(f'{x:.1f}' for x in info['loadavg'] or ())
  print(f'# {info["date"]}, {info["devices"]} ({info["cpu_count"]} CPUs, '
        f'{info["processor"]}, load {load}), jax {info["jax"]}, flax '
        f'{info["flax"]}, optax {info["optax"]}, size={size}, '
        f'clock={CLOCK["name"]}')
  print_table(rows)
  if program_rows:
    programs.print_table(program_rows, sys.stdout)
  dump()
  return 0


if __name__ == '__main__':
  sys.exit(main())
