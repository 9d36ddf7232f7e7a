"""Smoke test of benchmarks/run.py: it runs end to end at --size tiny.

Benchmarks are not tests: this checks that every benchmark runs and reports
a finite ratio, not what the ratios are.  To stay fast on a CPU runner the
child processes share a persistent compilation cache in a temporary
directory and XLA's backend optimisations are off (neither changes what the
script does).
"""

import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import run  # noqa: E402  pylint: disable=g-import-not-at-top


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('bench')
  out = tmp / 'results.json'
  env = dict(os.environ)
  env.update({
      'JAX_PLATFORMS': 'cpu',
      'XLA_FLAGS': '--xla_backend_optimization_level=0',
      'JAX_COMPILATION_CACHE_DIR': str(tmp / 'jax_cache'),
      'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0',
      'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES': '0',
  })
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, 'benchmarks', 'run.py'),
       '--size', 'tiny', '--dispatch-calls', '7', '--dispatch-reps', '2',
       '--json', str(out)],
      capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return proc.stdout, json.loads(out.read_text())


def test_every_benchmark_reports_a_finite_ratio(tiny_run):
  _, data = tiny_run
  rows = {r['benchmark']: r for r in data['results']}
  families = {name.split(':')[0] for name in rows}
  assert families == set(run.BENCHMARKS) - {'programs'}
  for name in ('train_step:cnn', 'train_step:resnet', 'compile:cnn',
               'compile:resnet', 'init:cnn init_by_shape',
               'init:cnn create_by_shape', 'init:resnet init_by_shape',
               'dispatch', 'memory', 'memory:build', 'pmap_step',
               'pmap_step:replicate()'):
    assert name in rows, name
  for row in data['results']:
    for key in ('legacy', 'linen', 'ratio', 'ratio_q1', 'ratio_q3'):
      assert math.isfinite(row[key]) and row[key] > 0, (row['benchmark'], key)
    assert row['ok'] in ('yes', 'noise', 'NO', '-')
    assert (row['target'] is None) == (row['ok'] == '-')


def test_programs_and_machine_are_recorded(tiny_run):
  _, data = tiny_run
  assert data['size'] == 'tiny' and data['clock'] == 'cpu'
  # the --dispatch-* overrides reach the recorded configuration
  assert data['config']['dispatch_calls'] == 7
  assert data['config']['dispatch_reps'] == 2
  assert data['config']['memory_steps'] == run.SIZES['tiny']['memory_steps']
  for key in ('date', 'devices', 'jax', 'flax', 'optax', 'cpu_count'):
    assert data['machine'][key], key
  programs = {p['program']: p for p in data['programs']}
  assert set(programs) == {'cnn', 'cnn:upgraded', 'resnet', 'pmap cnn',
                           'pmap cnn:replicate()'}
  for program in programs.values():
    assert isinstance(program['identical_stablehlo'], bool)
    for variant in ('legacy', 'linen'):
      assert program[variant]['stablehlo_ops'] > 0


def test_table_is_printed(tiny_run):
  stdout, data = tiny_run
  lines = stdout.splitlines()
  assert lines[0].startswith('# ') and 'size=tiny' in lines[0]
  assert lines[1].split()[:4] == ['benchmark', 'flaxlegacy', 'linen+optax',
                                  'ratio']
  for row in data['results']:
    assert any(line.startswith(row['benchmark'] + ' ') for line in lines), (
        row['benchmark'])
  assert any(line.startswith('programs (deterministic') for line in lines)


def test_dispatch_override_must_be_positive(capsys):
  with pytest.raises(SystemExit):
    run.main(['--size', 'tiny', '--dispatch-calls', '0'])
  assert '--dispatch-calls must be at least 1' in capsys.readouterr().err
  # the table of sizes itself is not changed by an override
  assert run.SIZES['tiny']['dispatch_calls'] == 10
