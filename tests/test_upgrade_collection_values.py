"""flaxlegacy upgrade: ``nn.Collection`` as a value, not a type.

``nn.Collection`` in a type (a ``flax.struct`` field, an annotation) is
``dict`` now: the variables of linen's collections.  As a value it is a
legacy object with a life of its own: ``nn.Collection().mutate()`` as a
context manager (here in a file the program pass reads: it opens an
``nn.stochastic`` block), ``store`` into it from a module (gfsa's side outputs: a
``flax.nn.utils.CallStack`` of collections that tag modules store into),
``as_dict()``.  Before, the name was rewritten ``dict`` wherever it stood,
with no TODO: ``dict().mutate()`` failed at run time (AttributeError).  Now
``nn.Collection(...)`` keeps its name and gets a TODO (linen keeps such
values in a collection of ``apply``'s ``mutable=``, written by
``Module.sow``: a port by hand); the type (annotations,
``isinstance(state, nn.Collection)`` of a state that is a dict now) is
still ``dict``.
"""

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

FILES = {
    'tags.py': '''\
        import contextlib

        import flax
        from flax import nn
        import jax
        import jax.numpy as jnp

        _stack = flax.nn.utils.CallStack()


        class Tag(nn.Module):

          def apply(self, value):
            if _stack:
              _stack[-1].store(value)
            return value


        @contextlib.contextmanager
        def collect(rng):
          result = {}
          with flax.nn.Collection().mutate() as coll:
            with _stack.frame(coll):
              with nn.stochastic(rng):
                yield result
          result.update(coll.as_dict())


        def tag_entropy(logits, name=None):
          # a tag module called from a plain function, as gfsa's
          # encourage_discrete_logits calls SideOutput
          entropy = -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits))
          Tag(entropy, name=(name or 'logit') + '_entropy')
          return logits


        def is_collection(value):
          return isinstance(value, nn.Collection)


        @flax.struct.dataclass
        class State:
          model_state: nn.Collection
          step: int
        ''',
    # the program: the model called inside the codebase's collect()
    'program.py': '''\
        import flax
        from flax import nn
        import jax
        import jax.numpy as jnp

        import tags


        class Net(nn.Module):

          def apply(self, x):
            y = nn.Dense(x, 3, name='dense')
            return tags.Tag(y, name='out')


        def main():
          x = jnp.ones((2, 4))
          _, params = Net.init(jax.random.PRNGKey(0), x)
          model = nn.Model(Net, params)
          with tags.collect(jax.random.PRNGKey(1)) as captured:
            y = model(x)
          return y, captured
        ''',
}


def _line(text, needle):
  lines = text.splitlines()
  for i, line in enumerate(lines):
    if needle in line:
      return i, lines
  raise AssertionError(f'{needle!r} not in the upgraded text')


def _todo_above(lines, i):
  j = i - 1
  while j >= 0 and lines[j].strip().startswith('#'):
    if lines[j].strip().startswith(TODO) and 'Collection' in lines[j]:
      return True
    j -= 1
  return False


def test_collection_built_as_a_value_keeps_its_name_with_a_todo(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'tags.py').read_text()
  assert 'dict().mutate()' not in text
  i, lines = _line(text, '.Collection().mutate() as coll:')
  assert _todo_above(lines, i), '\n'.join(lines[max(0, i - 4):i + 1])


def test_isinstance_of_collection_is_dict(tmp_path):
  """``isinstance(state, nn.Collection)`` (rigl's and sam's tests of the
  state a model's init gives): the state is a dict now."""
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'tags.py').read_text()
  assert 'return isinstance(value, dict)' in text


def test_collection_in_a_type_is_still_dict(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  text = (out / 'tags.py').read_text()
  assert 'model_state: dict' in text
