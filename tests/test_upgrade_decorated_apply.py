"""flaxlegacy upgrade: a legacy module whose ``apply`` carries a decorator
of its own (gfsa's ``@gin.configurable("Name")`` on every layer's
``apply``: gin bindings give the sizes, ``Layer.dim = 8`` in a .gin file).

The upgrade splits ``apply``'s parameters between dataclass fields and
``__call__`` parameters.  Before, the decorator was dropped with no TODO:
the configurable vanished (``gin.parse_config`` of the codebase's bindings
raised "No configurable matching", a field bound only by gin was missing
or kept a ``gin.REQUIRED`` default).  Now, where a lone
``@gin.configurable`` cannot go on the class for certain
(tests/test_upgrade_gin_classes.py: where it can), the decorator stays on
``__call__`` (under ``compact``: what it wraps still runs, and gin still
gives the parameters that stay call parameters) and the class gets a TODO
naming it: the hyper-parameters that became fields are out of its reach.
Here no binding of the codebase names the configurables (their config is
elsewhere) and a call may leave out ``mask``, a ``__call__`` parameter
with a default that such a binding could give.
"""

import textwrap

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

GIN_STUB = '''\
    def configurable(fn_or_name=None, **kwargs):
      if callable(fn_or_name):
        return fn_or_name
      return lambda fn: fn


    REQUIRED = object()
    '''

FILES = {
    'gin/__init__.py': GIN_STUB,
    'layers.py': '''\
        import functools

        from flax import nn
        import gin


        def traced(fn):
          @functools.wraps(fn)
          def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
          return wrapper


        class Scaled(nn.Module):
          """A dense layer whose size gin gives."""

          @gin.configurable("Scaled")
          def apply(self, x, mask=None, features=gin.REQUIRED, scale=2.0):
            if mask is not None:
              x = x * mask[0]
            return scale * nn.Dense(x, features, name='dense')


        class Traced(nn.Module):

          @traced
          def apply(self, x, features):
            return nn.Dense(x, features, name='dense')


        class Plain(nn.Module):

          def apply(self, x, features):
            return nn.Dense(x, features, name='dense')


        @nn.module
        @gin.configurable
        def steps(x, mask=None, features=gin.REQUIRED):
          if mask is not None:
            x = x * mask[0]
          return nn.Dense(x, features, name='dense')


        class Bare(nn.Module):
          """A bare @gin.configurable on apply registered the name 'apply'."""

          @gin.configurable
          def apply(self, x, features=4):
            return nn.Dense(x, features, name='dense')


        @nn.module
        def plain_steps(x, features):
          return nn.Dense(x, features, name='dense')
        ''',
}


def _class_block(text, name):
  lines = text.splitlines()
  at = next(i for i, l in enumerate(lines)
            if l.startswith(f"class {name}("))
  start = at
  while start > 0 and lines[start - 1].startswith('#'):
    start -= 1
  end = next((i for i in range(at + 1, len(lines))
              if lines[i].startswith('class ')), len(lines))
  return lines[start:at], lines[at:end]


def _decorators_of_call(body):
  at = next(i for i, l in enumerate(body) if 'def __call__(' in l)
  out = []
  i = at - 1
  while i >= 0 and body[i].strip().startswith('@'):
    out.insert(0, body[i].strip())
    i -= 1
  return out


def test_gin_configurable_apply_keeps_its_decorator_with_a_todo(tmp_path):
  _, out, report = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'layers.py').read_text()
  comments, body = _class_block(text, 'Scaled')
  assert any(c.startswith(TODO) and '@gin.configurable("Scaled")' in c
             for c in comments), '\n'.join(comments + body)
  decorators = _decorators_of_call(body)
  assert decorators[-1] == '@gin.configurable("Scaled")', decorators
  assert decorators[0].endswith('.compact'), decorators
  assert any('@gin.configurable("Scaled")' in t['why']
             for t in report['files']['layers.py']['left'])


def test_any_decorator_of_apply_is_kept_with_a_todo(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = textwrap.dedent((out / 'layers.py').read_text())
  comments, body = _class_block(text, 'Traced')
  assert any(c.startswith(TODO) and '@traced' in c for c in comments)
  assert _decorators_of_call(body)[-1] == '@traced'


def test_undecorated_apply_has_no_todo(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'layers.py').read_text()
  for name in ('Plain', 'plain_steps'):
    comments, body = _class_block(text, name)
    assert not any(c.startswith(TODO) for c in comments), name
    assert len(_decorators_of_call(body)) == 1, name


def test_nn_module_function_keeps_its_other_decorator_with_a_todo(tmp_path):
  """``@nn.module @gin.configurable def steps(...)`` (gfsa's ggnn_steps):
  the class made from the function keeps ``@gin.configurable`` on
  ``__call__``, with a TODO."""
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'layers.py').read_text()
  comments, body = _class_block(text, 'steps')
  assert any(c.startswith(TODO) and '@gin.configurable' in c
             for c in comments), '\n'.join(comments + body)
  decorators = _decorators_of_call(body)
  assert decorators[-1] == '@gin.configurable', decorators
  assert decorators[0].endswith('.compact'), decorators


def test_bare_configurable_apply_keeps_its_decorator_with_a_todo(tmp_path):
  """Bare on ``apply``, gin registered the name ``apply``; on the class it
  would register ``Bare``: kept on ``__call__``."""
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'layers.py').read_text()
  comments, body = _class_block(text, 'Bare')
  assert any(c.startswith(TODO) and '@gin.configurable' in c
             for c in comments), '\n'.join(comments + body)
  assert _decorators_of_call(body)[-1] == '@gin.configurable'
