"""flaxlegacy vs linen + optax: the same models, one process, interleaved.

    python benchmarks/run.py                 # CPU-sized defaults
    python benchmarks/run.py --size tiny     # smoke test (seconds)
    python benchmarks/run.py --only train_step,compile --json out.json

Each benchmark builds the legacy program (``from flax import nn, optim``
under flaxlegacy) and its linen + optax port, warms both up, then alternates
them repetition by repetition and reports medians and the ratio
flaxlegacy / linen+optax.  Memory and the 8-device pmap step run in separate
processes (peak RSS is per process; the device count is fixed when JAX
starts).  On a GPU machine the ResNet benchmarks use ResNet-50 at 224x224.

Targets (ratios): train step <= 1.02, compile <= 1.10, init <= 1.20,
dispatch <= 1.05, memory <= 1.05, pmap step <= 1.02.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
  sys.path.insert(0, REPO)

import flaxlegacy  # noqa: E402  pylint: disable=g-import-not-at-top
flaxlegacy.activate()  # also where the start-up .pth is not installed

import jax  # noqa: E402  pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # noqa: E402  pylint: disable=g-import-not-at-top

from benchmarks import models  # noqa: E402  pylint: disable=g-import-not-at-top

TARGETS = {'train_step': 1.02, 'compile': 1.10, 'init': 1.20,
           'dispatch': 1.05, 'memory': 1.05, 'pmap_step': 1.02}

SIZES = {
    # cnn batch, resnet name, image size, width, batch, reps, steps per rep
    'tiny': dict(cnn_batch=8, resnet='resnet18', image=16, width=8,
                 resnet_batch=4, reps=2, steps=2, dispatch_calls=20,
                 memory_steps=2, memory_reps=1),
    'cpu': dict(cnn_batch=128, resnet='resnet18', image=32, width=32,
                resnet_batch=16, reps=15, steps=5, dispatch_calls=300,
                memory_steps=10, memory_reps=3),
    'gpu': dict(cnn_batch=128, resnet='resnet50', image=224, width=64,
                resnet_batch=64, reps=20, steps=20, dispatch_calls=1000,
                memory_steps=20, memory_reps=3),
}


def block(tree):
  jax.tree_util.tree_map(
      lambda x: x.block_until_ready() if hasattr(x, 'block_until_ready')
      else x, tree)
  return tree


def interleaved(fns, reps):
  """Runs each fn once per repetition, alternating the order; returns times."""
  times = {name: [] for name in fns}
  names = list(fns)
  for rep in range(reps):
    order = names if rep % 2 == 0 else names[::-1]
    for name in order:
      t0 = time.perf_counter()
      fns[name]()
      times[name].append(time.perf_counter() - t0)
  return times


def result(name, what, times, unit='ms', scale=1e3, per=1):
  legacy = statistics.median(times['legacy']) / per * scale
  linen = statistics.median(times['linen']) / per * scale
  return {'benchmark': name, 'what': what, 'unit': unit,
          'legacy': legacy, 'linen': linen, 'ratio': legacy / linen,
          'target': TARGETS[name.split(':')[0]],
          'spread_legacy': (max(times['legacy']) - min(times['legacy'])) /
                           per * scale,
          'spread_linen': (max(times['linen']) - min(times['linen'])) /
                          per * scale}


def _builders(cfg):
  return {
      'cnn': lambda v: models.build_cnn(v, cfg['cnn_batch']),
      'resnet': lambda v: models.build_resnet(
          v, cfg['resnet_batch'], cfg['resnet'], cfg['image'], cfg['width']),
  }


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
      fns[variant]()  # compile + warm up
    times = interleaved(fns, cfg['reps'])
    rows.append(result(f'train_step:{model}', f'jitted train step, {model}',
                       times, per=cfg['steps']))
  return rows


def bench_compile(cfg):
  rows = []
  for model, build in _builders(cfg).items():
    built = {v: build(v) for v in ('legacy', 'linen')}

    def compile_fn(variant):
      step, state, batch = built[variant]
      def run():
        jax.clear_caches()
        step.lower(*state, batch).compile()
      return run
    fns = {v: compile_fn(v) for v in built}
    times = interleaved(fns, max(3, cfg['reps'] // 3))
    rows.append(result(f'compile:{model}', f'trace + compile, {model}',
                       times))
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
    block(models.LegacyCNN.create_by_shape(key, [(cnn_shape, jnp.float32)]))

  def legacy_res():
    with models.nn.stateful() as state:
      out = legacy_resnet.init_by_shape(key, [(res_shape, jnp.float32)])
    block((out, state))

  def linen_res():
    block(linen_resnet.init(key, jnp.ones(res_shape)))

  rows = []
  for name, legacy, linen in (
      ('init:cnn init_by_shape', legacy_cnn, linen_cnn),
      ('init:cnn create_by_shape', legacy_cnn_create, linen_cnn),
      (f'init:{cfg["resnet"]} init_by_shape', legacy_res, linen_res)):
    legacy()
    linen()
    times = interleaved({'legacy': legacy, 'linen': linen},
                        max(3, cfg['reps'] // 2))
    rows.append(result(name, name.split(':', 1)[1] + ' vs linen init', times))
  return rows


def bench_dispatch(cfg):
  """Per-step overhead for a ResNet-50-size tree of tiny leaves."""
  kwargs = models.resnet_kwargs('resnet50', small_inputs=True, num_filters=4)
  shape = (1, 8, 8, 3)
  _, legacy_params = models.LegacyResNet.partial(**kwargs).init_by_shape(
      jax.random.PRNGKey(0), [(shape, jnp.float32)])
  linen_params = models.LinenResNet(**kwargs).init(
      jax.random.PRNGKey(0), jnp.ones(shape))['params']
  tiny = lambda tree: jax.tree_util.tree_map(  # noqa: E731
      lambda x: jnp.zeros((2,), jnp.float32), tree)
  legacy_params, linen_params = tiny(legacy_params), tiny(linen_params)
  n_legacy = len(jax.tree_util.tree_leaves(legacy_params))
  n_linen = len(jax.tree_util.tree_leaves(linen_params))

  optimizer = models.legacy_optimizer(
      models.nn.Model(models.LegacyResNet.partial(**kwargs), legacy_params))
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  state = train_state.TrainState.create(apply_fn=None, params=linen_params,
                                        tx=models.linen_tx())
  legacy_step = jax.jit(lambda opt, g: opt.apply_gradient(g))
  linen_step = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  # Legacy takes the gradient with the target's structure (an nn.Model).
  legacy_grads, linen_grads = optimizer.target, linen_params
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
  times = interleaved({'legacy': legacy, 'linen': linen}, cfg['reps'])
  return [result('dispatch', f'jitted apply step on {n_legacy} vs {n_linen} '
                 'param leaves (Optimizer vs TrainState)', times, unit='us',
                 scale=1e6, per=calls)]


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
  times = {'legacy': [], 'linen': []}
  for rep in range(cfg['memory_reps']):
    order = ('legacy', 'linen') if rep % 2 == 0 else ('linen', 'legacy')
    for variant in order:
      out = _child(['--_memory-child', variant, '--size', size])
      times[variant].append(out['maxrss_kb'])
  return [result('memory', f'peak RSS of {cfg["memory_steps"]} '
                 f'{cfg["resnet"]} train steps (separate processes)', times,
                 unit='MiB', scale=1 / 1024)]


def memory_child(variant, cfg):
  import resource  # pylint: disable=g-import-not-at-top
  step, state, batch = models.build_resnet(
      variant, cfg['resnet_batch'], cfg['resnet'], cfg['image'], cfg['width'])
  run = _stepper(step, state, batch, cfg['memory_steps'])
  run()
  print(json.dumps({'maxrss_kb': resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss}))


def bench_pmap(cfg, size):
  out = _child(['--_pmap-child', '--size', size], {
      'XLA_FLAGS': (os.environ.get('XLA_FLAGS', '') +
                    ' --xla_force_host_platform_device_count=8').strip(),
      'JAX_PLATFORMS': 'cpu'})
  return [out]


def pmap_child(cfg):
  """Data-parallel CNN step on 8 CPU devices: replicate() vs jax_utils."""
  from flax import jax_utils  # pylint: disable=g-import-not-at-top
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  n = jax.local_device_count()
  per_device = max(1, cfg['cnn_batch'] // n)
  batch = models.make_batch(per_device * n, (28, 28, 1))
  batch = jax.tree_util.tree_map(
      lambda x: x.reshape((n, per_device) + x.shape[1:]), batch)
  key = jax.random.PRNGKey(0)

  def legacy_step(optimizer, batch):
    def loss_fn(model):
      return models.cross_entropy(model(batch['image']), batch['label'])
    loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
    grad = lax.pmean(grad, 'batch')
    return optimizer.apply_gradient(grad), loss

  def linen_step(state, batch):
    def loss_fn(params):
      return models.cross_entropy(
          state.apply_fn({'params': params}, batch['image']), batch['label'])
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    grads = lax.pmean(grads, 'batch')
    return state.apply_gradients(grads=grads), loss

  _, params = models.LegacyCNN.init_by_shape(key, [((1, 28, 28, 1),
                                                    jnp.float32)])
  optimizer = models.legacy_optimizer(
      models.nn.Model(models.LegacyCNN, params)).replicate()
  module = models.LinenCNN()
  state = jax_utils.replicate(train_state.TrainState.create(
      apply_fn=module.apply, params=module.init(key, jnp.ones(
          (1, 28, 28, 1)))['params'], tx=models.linen_tx()))
  fns = {
      'legacy': _stepper(jax.pmap(legacy_step, axis_name='batch'),
                         (optimizer,), batch, cfg['steps']),
      'linen': _stepper(jax.pmap(linen_step, axis_name='batch'), (state,),
                        batch, cfg['steps']),
  }
  for f in fns.values():
    f()
  times = interleaved(fns, cfg['reps'])
  print(json.dumps(result('pmap_step', f'pmap CNN step on {n} CPU devices',
                          times, per=cfg['steps'])))


BENCHMARKS = ('train_step', 'compile', 'init', 'dispatch', 'memory',
              'pmap_step')


def machine():
  devices = jax.devices()
  return {
      'date': time.strftime('%Y-%m-%d'),
      'platform': platform.platform(),
      'processor': platform.processor() or platform.machine(),
      'cpu_count': os.cpu_count(),
      'devices': f'{len(devices)} x {devices[0].device_kind}',
      'python': platform.python_version(),
      'jax': jax.__version__,
  }


def print_table(rows, out=sys.stdout):
  print(f'{"benchmark":34} {"flaxlegacy":>12} {"linen+optax":>12} '
        f'{"ratio":>7} {"target":>7}  ok', file=out)
  for r in rows:
    ok = 'yes' if r['ratio'] <= r['target'] else 'NO'
    print(f'{r["benchmark"]:34} {r["legacy"]:10.3f}{r["unit"]:>2} '
          f'{r["linen"]:10.3f}{r["unit"]:>2} {r["ratio"]:7.3f} '
          f'{r["target"]:7.2f}  {ok}', file=out)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--size', choices=sorted(SIZES), default=None,
                      help='problem sizes (default: gpu on a GPU, else cpu)')
  parser.add_argument('--only', default=','.join(BENCHMARKS),
                      help='comma-separated subset of ' + ', '.join(BENCHMARKS))
  parser.add_argument('--json', default=None, help='write results here')
  parser.add_argument('--_memory-child', dest='memory_child', default=None,
                      help=argparse.SUPPRESS)
  parser.add_argument('--_pmap-child', dest='pmap_child', action='store_true',
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  size = args.size or ('gpu' if jax.default_backend() == 'gpu' else 'cpu')
  cfg = SIZES[size]
  if args.memory_child:
    return memory_child(args.memory_child, cfg)
  if args.pmap_child:
    return pmap_child(cfg)
  selected = [b for b in args.only.split(',') if b]
  unknown = sorted(set(selected) - set(BENCHMARKS))
  if unknown:
    parser.error(f'unknown benchmark(s): {", ".join(unknown)}')
  rows = []
  for name in selected:
    if name == 'memory':
      rows += bench_memory(cfg, size)
    elif name == 'pmap_step':
      rows += bench_pmap(cfg, size)
    else:
      rows += globals()['bench_' + name](cfg)
    print(f'... {name} done', file=sys.stderr, flush=True)
  info = machine()
  print(f'# {info["date"]} {info["devices"]} ({info["cpu_count"]} CPUs), '
        f'jax {info["jax"]}, size={size}')
  print_table(rows)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'machine': info, 'size': size, 'results': rows}, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
