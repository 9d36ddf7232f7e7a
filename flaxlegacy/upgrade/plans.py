"""Plans: what a rule decided the target code must do, apart from
the text that does it (issue 24: "what a rule decides ... is kept apart
from the text it emits").

A rule case (rules/apply/*.py, rules/modules.py, rules/module_methods.py;
the program pass's, rules/program/*.py, rules/lifecycle_runtime.py and
the cache's init in rules/attention_cache.py) reads the legacy code and
the facts, decides -- or leaves a TODO and answers the code as it was
-- and returns one of these plans; an emitter (upgrade/emit/, one per
target: ``LinenEmitter`` today) turns the plan into libcst nodes.  A plan
says what is wanted in target-neutral terms (a parameter with its
initializer and shape, a variable of a collection, a dropout, a submodule
of a class with its hyper-parameters, inputs and explicit name, a module
class with its fields); it never holds target spellings (``nn.Dropout``,
``self.variable``, ``@nn.compact``).  The user's own code inside a plan --
an argument as written, an initializer expression, the body of ``apply``
-- stays libcst nodes: it is copied, not decided (one exception, decided
by the program pass: the legacy attention cache a model is given becomes
the argument ``True``, the module decodes).  TODOs and report entries
stay with the rule.

The module rules outside the module bodies' cases decide plans too
(rules/partials.py, splat.py, runtime_modules.py, recurrent.py,
attention.py, attention_cache.py, subclasses.py, drivers.py,
called_layers.py, initializer_partials.py, partial_calls.py, and the
body's lifted transforms and dict fields, rules/apply/), as does the
program pass's threaded ``nn.stateful`` block
(rules/program/stateful.py).

Plans are frozen: an emitter reads them and never changes them.  This
module imports nothing of the upgrade (a leaf under facts and rules).
"""

import dataclasses
from typing import Any, Optional, Tuple


def _plan(cls):
  return dataclasses.dataclass(frozen=True, eq=False)(cls)


# -- what a construction builds --


@_plan
class ModuleRef:
  """The module a construction builds.

  ``expr``: the callee as the user wrote it (rewritten by the file's
  rules): a user class, a variable, a partial.  ``layer``: the legacy
  layer (a layer_table.Layer) when the reference is that layer itself,
  else None.  ``shipped``: the dotted name of the flaxlegacy layer that
  serves it where the target has none of the legacy numbers
  (layer_table.SHIPPED), else None.  ``user_subclass``: the layer is the
  user's subclass of a legacy layer (the user's name is kept).
  """
  expr: Any
  layer: Any = None
  shipped: Optional[str] = None
  user_subclass: bool = False


@_plan
class Hyper:
  """One hyper-parameter (constructor argument) of a submodule.

  ``key``: the legacy parameter it binds (a layer's legacy keyword, a
  class's field), ``'name'`` for an explicit name the user wrote, ``'**'``
  for a dict splatted into the constructor.  ``arg``: the user's argument
  (a libcst Arg, with its own spacing and comments).
  """
  key: Optional[str]
  arg: Any


@_plan
class AutoName:
  """The name a submodule gets where legacy named it and the target would
  name it differently.  ``literal``: the name, known statically; else a
  name counted at run time from one counter per body (``counter``: the
  counter's variable), as ``<type_name>_<n>``, ``<ctor_src>.__name__ +
  _<n>`` when the type is only known when the code runs, or a bare digit
  (``bare``: ``.shared()`` without a name).  ``given``: ``name=p`` where p
  may be None (its default): p, and the auto-name where it is None."""
  literal: Optional[str] = None
  counter: Optional[str] = None
  type_name: Optional[str] = None
  ctor_src: Optional[str] = None
  bare: bool = False
  # the name the call gives (an expression) where it may be None: the
  # auto-name is only for the runs where it is
  given: Any = None


@_plan
class SubmoduleCall:
  """A legacy ``Layer(x, hyper..., name=)`` / ``Module(x, field=...)`` call:
  construct the submodule and call it.

  ``module``: what is built (ModuleRef).  ``layer``: the legacy layer at
  the bottom of the callee's partials (a layer_table.Layer), or None for
  a module class.  ``hypers``: its constructor
  arguments in order (Hyper); for a layer keyed by legacy keyword (the
  emitter renames them), for a class by field.  ``direct_layer``: the
  callee is the legacy layer itself, not a partial of it (its positional
  hyper-parameters may stay positional and the keywords the target needs
  for the legacy numbers are added).  ``catch_all``: (field, ((key,
  value expr), ...)) of keywords a class's ``**`` catch-all collects, or
  None.  ``inputs``: the call's arguments (libcst Args; ``*`` / ``**``
  kept).  ``name``: the AutoName to add, or None (the user's explicit
  name, if any, is among the hypers).
  """
  module: ModuleRef
  hypers: Tuple[Hyper, ...]
  inputs: Tuple[Any, ...]
  layer: Any = None
  direct_layer: bool = False
  catch_all: Optional[Tuple[str, Tuple[Tuple[str, Any], ...]]] = None
  name: Optional[AutoName] = None


@_plan
class Instance:
  """One instance of a submodule built once and called where the legacy
  code called it (``X.shared(...)``, a local's ``X.partial(...)`` called
  once): ``module``, its ``hypers`` (Hyper; a layer's keyed by legacy
  keyword), ``layer`` (the legacy layer, or None for a class), and the
  ``name`` to add (AutoName) or None."""
  module: ModuleRef
  hypers: Tuple[Hyper, ...]
  layer: Any = None
  name: Optional[AutoName] = None


# -- randomness, parameters, variables --


@_plan
class Dropout:
  """Dropout of ``inputs`` at ``rate``; ``deterministic`` as the user
  passed it, or None for legacy's default (False: dropout on); ``rng`` the
  user's explicit key, or None (the module's ``dropout`` stream)."""
  inputs: Any
  rate: Any
  deterministic: Any = None
  rng: Any = None


@_plan
class RngDraw:
  """A new key from the random stream ``stream`` (``nn.make_rng()``)."""
  stream: str


@_plan
class HasRng:
  """Whether the random stream ``stream`` was given
  (``nn.is_stochastic()``)."""
  stream: str


@_plan
class Param:
  """A parameter ``name`` made by ``initializer`` at ``shape`` (legacy
  ``self.param(name, shape, init)``); each the user's Arg.  ``call``: the
  legacy call as rewritten so far (its callee and spacing are kept)."""
  name: Any
  shape: Any
  initializer: Any
  call: Any


@_plan
class Variable:
  """A variable ``name`` of the collection ``collection`` (legacy
  ``self.state``): initialised to ``initializer`` (an expression, or None
  for zeros) at ``shape``; ``write_only``: the code only writes it (no
  shape, no initial value), so it is made empty and set later."""
  collection: str
  name: Any
  shape: Any = None
  initializer: Any = None
  write_only: bool = False


@_plan
class IsStateful:
  """Whether the collection ``collection`` is being written or was given
  (legacy ``self.is_stateful()``)."""
  collection: str


# -- module definitions --


@_plan
class Field:
  """A hyper-parameter of a module class (a legacy ``apply`` parameter
  that is not an input).  ``default``: its default's source as the legacy
  code wrote it, or None; ``annotation``: the type the default shows
  ('bool', 'int', 'float', 'str', or 'Any'); ``kw_only``: it must be
  passed by keyword (a keyword-only legacy parameter after defaults);
  ``fresh_default``: the default is a list / dict literal, made anew per
  instance; ``catch_all``: the field collecting a legacy ``**kwargs``."""
  name: str
  annotation: str = 'Any'
  default: Optional[str] = None
  kw_only: bool = False
  fresh_default: bool = False
  catch_all: bool = False


@_plan
class CallMethod:
  """The method that runs a module (legacy ``apply`` or ``@nn.module``
  function body).  ``fn``: the legacy FunctionDef (name, spacing);
  ``self_param``: its first parameter (or None: a function, which gets
  ``self``); ``inputs``: the parameters that stay inputs (libcst Params, in
  order); ``star_arg``: a legacy ``*args`` Param, or None; ``kwonly``: the
  inputs that are keyword-only (with ``*args``); ``body``: the rewritten
  body; ``copied_fields``: fields the body assigns, copied to locals
  first; ``autoname_counter``: the name of the one counter the body's
  run-time auto-names draw from, or None; ``autoname_frame``: the method
  runs in a counter frame of its own, which functions and lambdas it calls
  draw from too (rules/autoname_stack.py), and its counter is that
  frame's."""
  fn: Any
  self_param: Any
  inputs: Tuple[Any, ...]
  body: Any
  star_arg: Any = None
  kwonly: Tuple[Any, ...] = ()
  copied_fields: Tuple[str, ...] = ()
  autoname_counter: Optional[str] = None
  autoname_frame: bool = False


@_plan
class ModuleClass:
  """A module class made from an ``@nn.module`` function: ``name``, its
  ``fields`` (the field statements, as written for the target and read by
  the file's rules), its call method ``call`` (a CallMethod; a docstring
  of the function documents the class), and the function's
  ``leading_lines``."""
  name: str
  fields: Tuple[Any, ...]
  call: CallMethod
  leading_lines: Tuple[Any, ...] = ()


@_plan
class ModuleBase:
  """A base class that is legacy's module base spelled in a way the
  rewritten imports do not cover: ``base``, the Arg; ``dotted``, its
  dotted name; ``spelled_out``: written from the package
  (``flax.nn.Module``, ``flax.nn.base.Module``) rather than through the
  file's ``nn`` prefix (``nn.base.Module``)."""
  base: Any
  dotted: str
  spelled_out: bool


# -- module methods (legacy ``@nn.module_method``) --


@_plan
class ModuleMethod:
  """A legacy module method kept as a method of the class: ``fn`` the
  legacy FunctionDef, ``params`` the parameters it keeps (those that are
  fields dropped: the fields hold them), ``body`` its rewritten body,
  ``autoname_counter`` as in CallMethod."""
  fn: Any
  params: Any
  body: Any
  autoname_counter: Optional[str] = None


@_plan
class Setup:
  """Submodules built once, when the module is set up, under their legacy
  names, and shared by every method that used them: ``submodules``,
  (attribute, construction) pairs in order; each construction is the
  plan of the first place that built it (a SubmoduleCall, whose inputs
  are not part of it, or an Instance), the same at every place that
  built it; or -- built by a rule whose concept is not split into plans
  yet -- the constructor call as that rule wrote it."""
  submodules: Tuple[Tuple[str, Any], ...]


@_plan
class SubmoduleAttr:
  """The submodule a Setup built under the attribute ``attr``: the
  instance itself, or -- ``call``, a SubmoduleCall that built it where it
  is used -- called with that call's inputs."""
  attr: str
  call: Optional[SubmoduleCall] = None


@_plan
class SharedScope:
  """One scope the module's entry points (``entry_points``: ``__call__``
  and the module methods, by name) run their bodies in, so that whichever
  runs builds the submodules inline under their legacy names and finds
  those another built: ``name`` of the method that opens it, and
  ``decorator``, the call method's (written by the emitter before)."""
  name: str
  entry_points: Tuple[str, ...]
  decorator: Any


@_plan
class ScopedMethod:
  """An entry point that runs its body in a SharedScope: ``fn`` the
  method, ``scope`` the SharedScope's name, ``body_name`` the private
  method its body moves to, ``drop_decorators`` ids of the decorators
  that belong to the scope instead (the call method's)."""
  fn: Any
  scope: str
  body_name: str
  drop_decorators: Any = frozenset()


# -- subclasses of legacy layers and user modules (rules/subclasses.py) --


@_plan
class LayerBase:
  """The base of a user's subclass of the legacy layer ``layer`` (a
  layer_table.Layer) whose only method is a ``param`` override (a
  ParamOverride): the target's counterpart of that layer."""
  layer: Any


@_plan
class SuperParam:
  """``super().param(name, shape, initializer)`` in a ``param`` override:
  the parameter the base layer would make; ``call``, the legacy call, and
  its three arguments as written."""
  call: Any
  name: Any
  shape: Any
  initializer: Any


@_plan
class ParamOverride:
  """A user's ``param(self, name, shape, initializer)`` override of a
  legacy layer (``fn``, the FunctionDef): every parameter the layer makes
  goes through it; ``super_calls``, the SuperParams of its body (the
  body is otherwise the user's: ``shape`` and ``initializer`` hold what
  they held)."""
  fn: Any
  super_calls: Tuple[SuperParam, ...] = ()


@_plan
class PlainModuleBase:
  """The base of a class whose own ``apply`` replaces all its base (a
  legacy layer, or a user module with nothing but ``apply``) computes:
  the target's plain module base instead of ``base``, the base expression
  as written."""
  base: Any


# -- modules that drive other modules (rules/drivers.py) --


@_plan
class DrivenLifecycle:
  """``P.init(rng, *a, **kw)`` / ``P.call(params, *a, **kw)`` (``op``
  'init' or 'call') of a module class held by a parameter of the module
  (legacy's life cycle run inside a module): ``module``, the class's
  expression as rewritten (the field); ``inputs``, the positional
  arguments (the key or the parameters first; ``*`` kept); ``keywords``,
  the keyword arguments and ``**`` dicts, split between the class's
  hyper-parameters and its call keywords when the code runs (which class
  it is is known only then).  Args as written.  Returns what legacy
  returned: ``(outputs, params)`` for init, the outputs for call."""
  op: str
  module: Any
  inputs: Tuple[Any, ...]
  keywords: Tuple[Any, ...] = ()


# -- the program pass (rules/program/) --


@_plan
class CheckpointCall:
  """A checkpoint call of the program: ``op`` 'restore' (into the
  program's train state, reading a checkpoint the legacy program wrote
  too) or 'save' (in the legacy file format, which the legacy program and
  the restore above read); ``call``: the call as rewritten so far (its
  arguments are kept)."""
  op: str
  call: Any


# -- training steps (rules/program/training_steps.py) --


@_plan
class ApplyGradients:
  """One optimizer step of the train state ``state`` (the legacy
  optimizer's expression as rewritten so far) with the gradients
  ``grads`` (as the legacy code wrote them); ``learning_rate``: the
  learning rate the legacy call set for this step (as written), or None
  (the rate the transformation was built with)."""
  state: Any
  grads: Any
  learning_rate: Any = None


@_plan
class Optimize:
  """``new, loss[, aux] = opt.optimize(loss_fn)``: differentiate
  ``loss_fn`` at the parameters of the train state ``state`` and take one
  step (legacy ``Optimizer.optimize``).  ``new_state``, ``loss``, ``aux``:
  the targets the results go to (``aux`` None: the loss function returns
  the loss alone); ``learning_rate`` as in ApplyGradients.  Each an
  expression as the legacy code wrote it."""
  state: Any
  loss_fn: Any
  new_state: Any
  loss: Any
  aux: Any = None
  learning_rate: Any = None


@_plan
class ComputeGradient:
  """``opt.compute_gradient(loss_fn)``: differentiate ``loss_fn`` at the
  parameters of the train state ``state`` (as rewritten so far); legacy's
  ``(loss, grad)`` or ``(loss, aux, grad)``, chosen at run time by what
  ``loss_fn`` returns (legacy ``Optimizer.compute_gradient``)."""
  state: Any
  loss_fn: Any


@_plan
class Replicate:
  """The train state ``state`` (as rewritten so far) copied to every
  local device (``op`` 'replicate') or taken back from them
  ('unreplicate')."""
  op: str
  state: Any


@_plan
class ParamsOf:
  """The parameters a train state holds (legacy ``opt.target``):
  ``access``, the legacy attribute access as rewritten so far (its
  value and spacing are kept)."""
  access: Any


@_plan
class StepOf:
  """The number of steps a train state has taken (legacy
  ``opt.state.step``): ``state``, the train state's expression as
  rewritten so far."""
  state: Any


# -- the model life cycle (rules/program/lifecycle.py) --


@_plan
class InitModel:
  """Initialise the module ``module`` (the legacy module expression: a
  class, its partial) with the key ``rng`` (legacy ``M.init`` / ``create``
  / ``init_by_shape`` / ``create_by_shape``; each an expression as
  written).  Its inputs: ``shapes``, ((shape source, dtype source), ...)
  of legacy's input specs (or None), then ``inputs`` (Args, as written:
  the positional arguments that are inputs).  ``positional_fields``:
  ((field, value expression), ...) of positional arguments whose apply
  parameter is a hyper-parameter; ``fields``: keywords of the call that
  are the module's hyper-parameters; ``kwargs``: the other keywords (the
  call's)."""
  module: Any
  rng: Any
  shapes: Optional[Tuple[Tuple[str, str], ...]] = None
  inputs: Tuple[Any, ...] = ()
  positional_fields: Tuple[Tuple[str, Any], ...] = ()
  fields: Tuple[Any, ...] = ()
  kwargs: Tuple[Any, ...] = ()


@_plan
class ModelInit:
  """``output, params = M.init(...)`` / ``create``: ``init`` (an
  InitModel); ``output``: where legacy's first result goes (its output, or
  its shape), or None where the code drops it (``_``); ``params``: where
  the parameters go; ``carried_module``: the module expression the model
  must carry with its parameters (objects.model_carried), or None;
  ``collections_to``: the source of the name the other collections go to
  (``with nn.stateful() as t:`` around the init), or None; ``only``: the
  one collection that goes there (an attention cache), or None for every
  collection but the parameters.  The targets are expressions as
  written."""
  init: InitModel
  params: Any
  output: Any = None
  carried_module: Any = None
  collections_to: Optional[str] = None
  only: Optional[str] = None


@_plan
class InitAnyModule:
  """``target = X.init(rng, ...)`` of a value X that holds one of several
  legacy module classes, known only at run time: its ``args`` split into
  the class's fields and inputs when the code runs (each as written)."""
  target: Any
  module: Any
  args: Tuple[Any, ...]


@_plan
class ModulePartial:
  """``M.partial(...)`` at program level: the module with some
  hyper-parameters bound; ``call``, the legacy call as rewritten so far
  (its callee's value is the module, its arguments the bound ones)."""
  call: Any


@_plan
class ApplyModel:
  """Run the module ``module`` (legacy expression) with the parameters
  ``params`` on ``inputs`` (legacy ``M.call(params, *inputs)``; Args as
  written)."""
  module: Any
  params: Any
  inputs: Tuple[Any, ...] = ()


@_plan
class ModuleFunction:
  """The module ``module`` (as rewritten so far) as a function of its
  parameters and inputs (legacy ``M.call`` taken as a value): the
  keywords it is called with are split between fields and inputs when it
  runs."""
  module: Any


# -- optimizers (rules/program/optimizers.py) --


@_plan
class Transformation:
  """The gradient transformation of the legacy optimizer definition
  ``optim.<name>(...)``: ``hypers``, ((legacy parameter, its source as
  written), ...) as the call bound them, in order; ``per_step``: its
  hyper-parameters can be set per step (the codebase passes a learning
  rate per step, or the definition gave none); ``decay``: a weight decay
  is given and not zero; ``legacy``: (function, legacy parameters) of
  the legacy rule that reproduces the legacy numbers where no standard
  transformation does (collectors/programs.py ``LEGACY_OPTAX``), or None
  for the standard one (``OPTAX``)."""
  name: str
  hypers: Tuple[Tuple[str, str], ...]
  per_step: bool = False
  decay: bool = False
  legacy: Optional[Tuple[str, Tuple[str, ...]]] = None


@_plan
class MultiTransform:
  """Legacy ``optim.MultiOptimizer((traversal, opt), ...)``: each
  parameter the ``i``-th traversal's ``filters[i]`` selects is updated by
  ``transformations[i]``, the others not at all.  Both as rewritten so
  far (a filter function, a transformation)."""
  filters: Tuple[Any, ...]
  transformations: Tuple[Any, ...]


@_plan
class MakeTrainState:
  """The train state a legacy ``definition.create(target)`` made:
  parameters ``params`` (the target, as written), updated by ``tx`` (a
  Transformation or MultiTransform plan, or the source of an expression
  holding a transformation made elsewhere); ``apply_fn``: the apply
  function of the target's module as the pass recorded it (an ApplyFn),
  or None where it is not known (a TODO); ``carried``: the target is a
  model that carries its module (its own apply function); ``focus``: the
  filter of the ``ModelParamTraversal`` legacy's ``create(target,
  focus=...)`` was given (only the parameters it selects are updated, the
  rest stay: legacy's one-pair MultiOptimizer), or None."""
  params: Any
  tx: Any
  apply_fn: Any = None
  carried: bool = False
  focus: Any = None


@_plan
class TraversalObject:
  """A legacy ``optim.ModelParamTraversal(f)`` the code updates or
  iterates itself (kept as a traversal object); ``call``: the call as
  rewritten so far."""
  call: Any


@_plan
class DynamicScale:
  """Legacy ``optim.DynamicScale(...)`` (mixed-precision loss scaling);
  ``call``: the call as rewritten so far (its arguments are kept)."""
  call: Any


# -- models (rules/program/models.py) --


@_plan
class ApplyFn:
  """The function that applies a model's module to its parameters and
  inputs.  ``module``: the legacy module expression whose module applies
  (a node as written -- a class, with its fields' defaults, or its
  partial -- or the source of a class's name); ``state``: the source of a
  train state whose apply function it is; ``carried``: the model carries
  its module (objects.model_carried) and applies it itself.  None of
  them: a model with no module (``nn.Model(None, params)``)."""
  module: Any = None
  state: Optional[str] = None
  carried: bool = False


@_plan
class ModelApply:
  """A model called on its inputs (legacy ``model(x)``,
  ``model.method(x)``): apply ``fn`` (ApplyFn) with the parameters
  ``params`` (the source of the model's expression: a model is its
  parameters; None: the parameters of ``fn``'s train state, legacy
  ``opt.target(x)``) on ``inputs`` (Args as written).  ``fields``: the
  call's keywords that are the module's hyper-parameters (set when the
  module is built); ``method``: the legacy ``@nn.module_method`` called,
  or None; ``collections``: the source of the other collections' variables
  (``nn.stateful(s)``), or None; ``rng``: the source of the dropout key
  (``nn.stochastic(rng)``), or None; ``mutable``: the collection the call
  writes (then it returns the new one too), or None."""
  fn: ApplyFn
  params: Optional[str]
  inputs: Tuple[Any, ...] = ()
  fields: Tuple[Any, ...] = ()
  method: Optional[str] = None
  collections: Optional[str] = None
  rng: Optional[str] = None
  mutable: Optional[str] = None


@_plan
class ModelApplyAssign:
  """``target = model(x)`` (``apply``, a ModelApply) as a statement;
  ``new_state``: the source of the name the written collection goes to
  (``with nn.stateful(s) as new_state:``) where ``apply.mutable``, else
  None.  ``target`` as the legacy code wrote it."""
  apply: ModelApply
  target: Any
  new_state: Optional[str] = None


@_plan
class ModelValue:
  """Legacy ``nn.Model(M, params)`` (``call``, as rewritten so far): the
  parameters alone (a model is its parameters), or -- ``carried`` -- a
  model that carries its module M with them (objects.model_carried)."""
  call: Any
  carried: bool = False


@_plan
class ModelParams:
  """The parameters of a model (legacy ``model.params``): ``access``, the
  attribute as rewritten so far."""
  access: Any


@_plan
class ModelType:
  """The type a legacy ``nn.Model`` value has now (legacy
  ``isinstance(x, nn.Model)``): a model that carries its module
  (``carried``), or its parameters."""
  carried: bool = False


# -- collections and keys in program code (rules/program/stateful.py) --


@_plan
class ProgramRng:
  """Legacy ``nn.make_rng()`` (``op`` 'make_rng') / ``nn.is_stochastic()``
  ('is_stochastic') in program code: a key of the enclosing
  ``nn.stochastic`` scope, or whether there is one."""
  op: str


@_plan
class StochasticScope:
  """``with nn.stochastic(rng):`` kept as a scope program code draws keys
  from (ProgramRng; the model calls in it get the key as their dropout
  stream): ``call``, the ``nn.stochastic(rng)`` call as rewritten so
  far."""
  call: Any


@_plan
class CollectionDict:
  """``state.as_dict()`` of a legacy ``nn.Collection`` (``call``, as
  rewritten so far): the collection's variables as legacy's flat dict
  (``{'/block/bn': {'mean': m}}``)."""
  call: Any


@_plan
class CollectionCopy:
  """``with coll.mutate() as new:`` of a legacy ``nn.Collection`` (``call``,
  the ``coll.mutate()`` item as rewritten so far): ``new`` is a copy of the
  collection's variables the block may write into, ``coll`` unchanged."""
  call: Any


@_plan
class CollectionEntry:
  """``coll['/path']`` of a legacy ``nn.Collection`` (``subscript``, as
  rewritten so far): that module's values, legacy's entry of the flat
  layout (``legacy_model.collection_dict(coll)['/path']``)."""
  subscript: Any


# -- user-written optimizer definitions (rules/program/user_optimizers.py) --


@_plan
class UserTransformation:
  """The gradient transformation of a user-written legacy
  ``OptimizerDef``: ``definition``, the expression that makes the
  definition (``UserDef(...)`` as rewritten so far, or a name holding
  one); ``translated``: the upgrade translated the class into a function
  that returns the transformation (rules/optimizer_defs.py), so the
  expression is the transformation; else the class is kept and the
  transformation is asked of it.  A MakeTrainState's ``tx``."""
  definition: Any
  translated: bool = False


@_plan
class PerStepUserTransformation:
  """A translated user definition ``UserDef(...)`` (``call``, as
  rewritten so far) whose learning rate the program sets per step:
  ``static``, its other parameters (fixed when it is built: legacy
  branched on them in Python); ``default_rate``: the call gives no
  learning rate (it starts at zero, set at each step)."""
  call: Any
  static: Tuple[str, ...]
  default_rate: bool = False


# -- the life cycle of modules known at run time (rules/lifecycle_runtime.py) --


@_plan
class RuntimeLifecycle:
  """``target = X.<op>(rng, ...)`` (``op``: 'create', 'create_by_shape',
  'init' or 'init_by_shape') of a value X that holds one of several
  legacy module classes, known only when the code runs: carried to run
  time, which class deciding which keywords are fields.  ``module``: X,
  ``args``: the call's arguments (Args), ``target``: each as written."""
  op: str
  module: Any
  args: Tuple[Any, ...]
  target: Any


@_plan
class RuntimeStateful:
  """``with nn.stateful(...) as s:`` (``call``, the ``nn.stateful(...)``
  call as rewritten so far) around models that carry their modules:
  kept as a scope those models apply in at run time, with its
  collections, writing back what they change (``s``: the dict of
  collections)."""
  call: Any


# -- types and the attention cache in program code --


@_plan
class LegacyType:
  """A legacy type named in a type annotation or a typing subscript
  (rules/program/annotations.py): ``what`` the values it typed are now --
  'Model' (a model: its parameters, or a model kept legacy with a TODO:
  no single type), 'Optimizer' (a train state), 'DynamicScale' (today's
  loss scaling), 'Collection' (a collection's variables, a dict)."""
  what: str


@_plan
class InitializeCache:
  """Legacy ``cache_def.initialize_cache(shape[, dtype])`` of the cache
  an init stored (rules/attention_cache.py): ``cache``, the cache
  definition's expression, and ``args``, the call's arguments, each as
  rewritten so far; ``call``: the call (its spacing is kept)."""
  cache: Any
  args: Tuple[Any, ...]
  call: Any


# -- partials and splatted dicts (rules/partials.py, rules/splat.py) --


@_plan
class PartialModule:
  """``X.partial(k=v, ...)`` of a legacy layer, a module class or a partial
  of one: the module ``module`` (a ModuleRef) with hyper-parameters bound.
  ``hypers``: the call's arguments in order (Hyper: keyed by keyword, or
  ``'*'`` / ``'**'`` for a splatted one); ``layer``: the legacy layer at
  the bottom of the partials whose keywords they are (the emitter renames
  them), or None for a class (keyed by field: a catch-all's dict or a
  dict split at run time already written as their arguments);
  ``direct_layer``: ``module`` is the layer itself (the keywords the
  target needs for the legacy numbers are added); ``runtime``: X holds
  one of several module classes known only when the code runs, which
  class deciding which keywords are fields; ``renamed_for``: the legacy
  layers X may hold next to module classes, for which the keywords of
  ``renames`` (legacy -> linen) take their linen spelling when the code
  runs (the classes keep the legacy one)."""
  module: ModuleRef
  hypers: Tuple[Hyper, ...]
  layer: Any = None
  direct_layer: bool = False
  runtime: bool = False
  renamed_for: Tuple[Any, ...] = ()
  renames: Tuple[Tuple[str, str], ...] = ()


@_plan
class CatchAllDict:
  """The dict a module class's ``**`` catch-all field gets: ``items``,
  ((key, value expression), ...) of the keywords it collects, after
  ``base`` (the caller's own catch-all forwarded whole, an expression) or
  None."""
  items: Tuple[Tuple[str, Any], ...]
  base: Any = None


@_plan
class SplitKwargs:
  """A dict splatted into a legacy module call (``**d``) whose keys are
  known only when the code runs, split then (rules/splat.py): the entries
  of ``value`` (the dict's expression as rewritten so far) named in
  ``names`` go through; with ``catch_all`` (the field collecting legacy's
  ``**``), every other entry not named in ``elsewhere`` goes, with the
  ``extra`` items ((key, value expression), ...), into that field;
  without it, ``elsewhere`` given, any other entry is an unexpected
  argument (a TypeError, as legacy's); ``elsewhere`` None: the other
  entries are another split's."""
  value: Any
  names: Tuple[str, ...]
  catch_all: Optional[str] = None
  extra: Tuple[Tuple[str, Any], ...] = ()
  elsewhere: Optional[Tuple[str, ...]] = None


# -- a submodule whose class is known at run time (rules/runtime_modules.py) --


@_plan
class RuntimeSubmoduleCall:
  """A call of a hyper-parameter that holds module classes of different
  parameters (known only when the code runs which): construct the class
  it holds with the keywords that are its fields, inside the calling
  module, and call it on ``input`` with the others.  ``module``: the
  callee as rewritten; ``input``: the one positional Arg; ``keywords``:
  the call's keyword Args as written (an explicit ``name=`` among them);
  ``name``: the AutoName to add, or None."""
  module: Any
  input: Any
  keywords: Tuple[Any, ...]
  name: Optional[AutoName] = None


# -- legacy recurrent cells (rules/recurrent.py) --


@_plan
class RecurrentCell:
  """A legacy recurrent cell built in a module body, its hidden size read
  from the carry it is called with (legacy's; the upgrade cannot tell it
  where the cell is built): ``cell``, the legacy class's name
  ('LSTMCell', 'GRUCell', 'OptimizedLSTMCell'); ``hypers``, its keyword
  Args as written (hyper-parameters of the same names as the target's,
  an explicit ``name=``); ``name``, the AutoName to add, or None;
  ``inputs``, the (carry, inputs) Args it is called on where the legacy
  code called it (``nn.LSTMCell(carry, x, ...)``), or None where it is
  only built (``.shared(...)``, a scan's body)."""
  cell: str
  hypers: Tuple[Any, ...]
  name: Optional[AutoName] = None
  inputs: Optional[Tuple[Any, ...]] = None


@_plan
class CellPartial:
  """A legacy cell's partial (``nn.<Cell>.partial(...)``) that a local of
  a module body holds and only calls legacy-style (CellPartialCall):
  ``cell``, the legacy class's name; ``hypers``, its keyword Args as
  written (the cell's fields, ``name=``)."""
  cell: str
  hypers: Tuple[Any, ...]


@_plan
class CellPartialCall:
  """A call ``local(carry, inputs, **kw)`` of a CellPartial's local: the
  cell made (with the call's keyword Args, ``hypers``, and the AutoName
  ``name`` to add, or None) and called on ``inputs`` (the (carry, inputs)
  Args).  ``callee``: the local as rewritten."""
  callee: Any
  hypers: Tuple[Any, ...]
  inputs: Tuple[Any, ...]
  name: Optional[AutoName] = None


@_plan
class CellScan:
  """A recurrent cell as the body of a scan (``scan_in_dim``,
  ``jax.lax.scan``): ``cell`` (a RecurrentCell, built) run from the carry
  ``init`` over ``xs`` along ``axis`` (an int), one set of its parameters
  shared by every step, at the cell's path."""
  cell: RecurrentCell
  init: Any
  xs: Any
  axis: int = 0


@_plan
class CellCarry:
  """The initial carry of a legacy cell (``nn.LSTMCell.initialize_carry(
  rng, batch_dims, size[, init_fn])``): ``cell_expr``, the cell class as
  rewritten so far; ``rng``, the key, or None for a fixed key (the zeros
  carry does not depend on it, and a module then needs no random stream
  for it); ``batch_dims`` and ``size`` as written; ``init``, the carry's
  initializer (an initializers member), or None for zeros."""
  cell_expr: Any
  rng: Any
  batch_dims: Any
  size: Any
  init: Any = None


# -- legacy attention (rules/attention.py) --


@_plan
class Attention:
  """A legacy attention call (``nn.SelfAttention`` /
  ``nn.MultiHeadDotProductAttention``): the target's attention module
  with legacy's parameter tree, and legacy's mask built from the inputs
  when the code runs (legacy's rules).  ``call``: the legacy call as
  rewritten so far (its layout is kept); ``inputs_q``, ``inputs_kv``
  (None: self-attention): the inputs, plain variables (read twice);
  ``args``: ((legacy parameter, Arg), ...) of the call's arguments in
  order, keyed by the legacy parameter they bind (``'**'`` a splatted
  dict); ``given``: the legacy parameters the call gives, in order;
  ``splat``: the dict splatted into the call (its keys mapped when it
  runs), or None; ``cache``: the legacy cache it is given (the module
  decodes where it is not None), or None; ``dropout_rng``: the explicit
  dropout key, or None; ``name``: the user's ``name=`` Arg, or None;
  ``auto_name``: the AutoName to add, or None; ``guard``: (field, the
  callee as rewritten) where the call goes through a field whose default
  is legacy's attention class, checked to hold it when the code runs,
  or None; ``attention_fn``: the legacy ``attention_fn`` the call gives
  (called by the target through an adapter to legacy's keyword
  interface), or None (none, or legacy's own dot_product_attention, the
  target's default)."""
  call: Any
  inputs_q: Any
  args: Tuple[Tuple[str, Any], ...]
  given: Tuple[str, ...]
  inputs_kv: Any = None
  splat: Any = None
  cache: Any = None
  dropout_rng: Any = None
  name: Any = None
  auto_name: Optional[AutoName] = None
  guard: Optional[Tuple[str, Any]] = None
  attention_fn: Any = None


@_plan
class AttentionPartial:
  """Legacy ``field.partial(k=v, ...)`` of a hyper-parameter whose
  default is legacy's attention class: the keywords kept for the call
  through the field (checked and mapped when the code runs).  ``call``:
  the legacy call as rewritten so far; ``receiver``: the field's value as
  rewritten."""
  call: Any
  receiver: Any


# -- the attention cache in module bodies (rules/attention_cache.py) --


@_plan
class CacheEntry:
  """Legacy ``cache.store(v)`` / ``cache.retrieve([d])`` (``op`` 'store'
  or 'retrieve') on the module's cache parameter: the module's own entry
  of the decoding cache (a variable of the cache collection, with
  legacy's fields); ``args``: the call's arguments as rewritten so far."""
  op: str
  args: Tuple[Any, ...]


# -- a collection scope threaded through its model calls (rules/program/stateful.py) --


@_plan
class ThreadedBlock:
  """A ``with`` block whose collection scopes (``nn.stateful``, a legacy
  attention cache's ``mutate()``) were threaded through the model calls
  and inits in its body (their collections passed and returned there):
  the scopes go, the body stays.  ``block``: the With as rewritten so far;
  ``kept``: its other items as rewritten (a key scope kept), which keep
  the block; none: the body runs in the enclosing block."""
  block: Any
  kept: Tuple[Any, ...] = ()


# -- a value holding layers, module classes or functions, called
# legacy-style (rules/called_layers.py) --


@_plan
class RuntimeLayerCall:
  """A call, legacy-style (the input first, hyper-parameters by position
  or keyword), of a value that holds legacy layers, module classes or
  plain functions, which one known only when the code runs: a module
  class is constructed with the keywords that are its fields and called
  on the inputs with the rest; a function takes the call as written.
  ``callee``: the value as rewritten; ``positional``: the names of the
  hyper-parameters passed by position after the inputs (every possible
  class names them alike); ``counter``: the body's legacy auto-name
  counter, or None where the call gives its ``name=``; ``args``: the
  call's arguments as rewritten so far."""
  callee: Any
  positional: Tuple[str, ...]
  counter: Optional[str]
  args: Tuple[Any, ...]


# -- a partial of a user initializer of more than (key, shape)
# (rules/initializer_partials.py) --


@_plan
class LegacyInitializer:
  """``functools.partial(init, k=v)`` of a codebase initializer whose
  parameters after ``(key, shape)`` the partial binds: called as legacy
  layers called initializers, ``(key, shape)``, whatever else the target's
  layers pass.  ``partial``: the call as rewritten so far."""
  partial: Any


@_plan
class KnownModule:
  """A hyper-parameter holding module classes, called with positional
  hyper-parameters the classes the codebase gives it name alike, where a
  value the upgrade cannot see may reach it: the value, checked when the
  call runs to be one of ``known`` (names of this file).  ``module``: the
  callee as rewritten; ``where``: 'Class.field', for the error."""
  module: Any
  known: Tuple[str, ...]
  where: str


# -- a raw JAX transform over a local function of a module body
# (rules/apply/lifted_transforms.py) --


@_plan
class LiftedTransform:
  """A raw JAX transform of a local function of a module body that makes
  or reads the module's variables, lifted so that they behave as legacy's
  eager dicts made them: each variable made once, unbatched, one key per
  stream for the whole transform, no level added to the names.
  ``transform``: 'checkpoint', 'remat' or 'vmap' (the JAX transform as
  the user spelt it); ``function``: the function as rewritten (it takes
  the module first: LiftedFunction); ``args``: the transform's own
  arguments (Hyper: keyed by JAX's keyword, positional ones named);
  ``value``: the transformed function is a value, not called where it is
  made (it must hold the module already)."""
  transform: str
  function: Any
  args: Tuple[Hyper, ...] = ()
  value: bool = False


@_plan
class LiftedDecorator:
  """``@jax.remat`` / ``@jax.checkpoint`` (``transform``: 'remat' or
  'checkpoint') on a local function lifted as a LiftedTransform is."""
  transform: str


@_plan
class LiftedFunction:
  """A local function (a def or a lambda, as rewritten) that a
  LiftedTransform lifts: it takes the module as its first parameter
  (its body read the module's variables by closure)."""
  function: Any


@_plan
class LiftedCall:
  """A call (as rewritten) of a function a LiftedTransform lifts: the
  module passed first."""
  call: Any


# -- a local of a plain function holding a layer's partial, called
# legacy-style (rules/partial_calls.py) --


@_plan
class PartialCall:
  """``n(x, a, k=v, name=s)`` where the local ``n`` holds the target's
  partial of the legacy ``layer`` (a layer_table.Layer): the partial made
  a submodule with the hyper-parameters the call gives (Hyper: keyed by
  the legacy keyword, ``'name'`` for the name; the user's values as
  rewritten) and called on ``input``.  ``callee``: ``n`` as rewritten."""
  callee: Any
  layer: Any
  hypers: Tuple[Hyper, ...]
  input: Any


# -- a dict field read by a pytree map in a module body
# (rules/apply/frozen_fields.py) --


@_plan
class PlainDictField:
  """A dict hyper-parameter (``value``: the field's read, as rewritten)
  handed to a pytree function with the trees of the code: read as the
  plain dict legacy kept (a target that stores dict fields as another
  pytree node must convert it, or the trees' structures differ)."""
  value: Any
