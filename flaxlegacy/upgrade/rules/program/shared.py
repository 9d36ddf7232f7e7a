"""What every concept module of the program pass shares: the kinds a name
can hold, the import lines it adds, source-to-node parsing, and the small
source helpers several concepts use.  Imports no other module of
``rules/program/``."""

import os

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade.emit import linen as linen_emit
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules import optimizer_defs

OPT, MODEL, STRUCT = 'optimizer', 'model', 'struct'

USER_OPTDEF = optimizer_defs.KEEP
OPT_PARAM_NAMES = ('optimizer', 'opt', 'new_optimizer')


# a model that carries its module (objects.model_carried): the helper it


# becomes, imported under this name
MODEL_HELPER_IMPORT = linen_emit.MODEL_HELPER_IMPORT

MODEL_PARAM_NAMES = ('model',)


# typing constructs whose subscripts are types (a type alias outside an


# annotation: ``F = Callable[[nn.Model], Any]``)
TYPING_GENERICS = frozenset((
    'Callable', 'Type', 'Optional', 'Union', 'Mapping', 'MutableMapping',
    'Sequence', 'MutableSequence', 'List', 'Dict', 'Tuple', 'Set',
    'FrozenSet', 'Iterable', 'Iterator', 'Generator', 'Collection',
    'Awaitable', 'Coroutine', 'AsyncIterator', 'DefaultDict', 'Deque'))


# an assignment rule's answer when the statement is not its case (None is


# an answer: the statement stays as it is)
NEXT = object()


def expr_node(src):
  return cst_util.expr(src)


def stmt_node(src):
  return cst.parse_statement(src)


def codebase_model_class(codebase, path=None):
  """The one module class the program's models are built of, or None
  (objects.codebase_model_class)."""
  return objects.codebase_model_class(codebase, path)


def rel_of(codebase, file_facts):
  for rel, f in codebase.files.items():
    if f is file_facts:
      return rel
  return None


def codebase_per_step_lr(codebase):
  return any(getattr(f, 'per_step_lr', False) for f in codebase.files.values())


def nonzero(src):
  """Whether an argument's source is given and not a literal zero."""
  return src not in (None, '0', '0.0', '0.')


def is_state_name(expr):
  """``model_state``, ``init_state``, ``state.model_state`` ...: names the
  legacy examples give nn.Collection values."""
  name = expr.attr.value if isinstance(expr, cst.Attribute) else (
      expr.value if isinstance(expr, cst.Name) else '')
  return name == 'state' or name.endswith('_state')


def returns_optax(rw, call):
  """Whether ``call`` calls a function of this file, or ``module.fn`` of an
  imported file of the codebase (same directory first), that returns
  ``optim.X(...)`` the pass rewrites to optax."""
  if isinstance(call.func, cst.Name):
    return call.func.value in getattr(rw.f, 'optdef_functions', ())
  if not (isinstance(call.func, cst.Attribute)
          and isinstance(call.func.value, cst.Name)):
    return False
  local = call.func.value.value
  if local not in rw.f.imports:
    return False
  stem = rw.f.imports[local].split('.')[-1]
  here = os.path.dirname(rw.f.path)
  files = [f for p, f in rw.codebase.files.items()
           if os.path.splitext(os.path.basename(p))[0] == stem]
  files.sort(key=lambda f: os.path.dirname(f.path) != here)
  return bool(files) and call.func.attr.value in getattr(
      files[0], 'optdef_functions', ())


def specs(src):
  """``[((1, 28, 28, 1), jnp.float32)]`` -> [('(1, 28, 28, 1)', 'jnp.float32')]
  (facts.init_specs decides what is a shape and what a pair)."""
  specs = facts_lib.init_specs(src, opaque=True)
  if specs is None:
    return None
  return [(s, 'jnp.float32' if d is None else d) for s, d in specs]


def no_module(arg):
  """Whether the argument ``arg`` of ``nn.Model(M, params)`` is ``None``
  written out (a model of parameters alone), not passed by keyword or
  star."""
  return (arg.keyword is None and not arg.star
          and isinstance(arg.value, cst.Name) and arg.value.value == 'None')

