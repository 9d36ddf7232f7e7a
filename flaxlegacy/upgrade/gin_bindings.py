"""gin bindings as facts (for flow.py): what a binding names and gives.

A ``@gin.configurable`` function or class takes, beside the arguments the
codebase passes, whatever a gin binding gives its parameters.  The codebase
is taken as closed here as elsewhere: the bindings that count are the ones
in its source -- ``.gin`` files of the tree, ``gin.parse_config('...')``
strings, ``gin.bind_parameter('C.p', value)`` calls -- so a parameter no
binding names keeps what the codebase passes.

A binding's value is a literal (``GINVAL`` in flow.py: never a legacy
module, optimizer or model), a reference ``@name`` / ``@name()`` to a
configurable (the registered value, or what calling it gives) or a macro
``%NAME`` (a ``gin.constant`` or a macro line of a config text).

This module parses the text; flow.py evaluates.
"""

import re

# `scope/pkg.Configurable.param = value` (value: to the end of the
# statement, brackets continued over lines)
_BINDING = re.compile(r'^\s*([\w./]+)\s*=\s*(.*)$')
_REFERENCE = re.compile(r'@([\w./]+)(\(\))?')
_MACRO = re.compile(r'%([\w./]+)')


def split_name(name):
  """``'scope/pkg.C.p'`` -> ``('C', 'p')``; ``'NAME'`` (a macro) ->
  ``(None, 'NAME')``; None for a name gin would refuse."""
  name = name.rsplit('/', 1)[-1]
  if not name:
    return None
  parts = name.split('.')
  if len(parts) == 1:
    return None, parts[0]
  return parts[-2], parts[-1]


def configurable_name(name):
  """The name a reference ``@scope/pkg.C`` looks up: ``'C'``."""
  return name.rsplit('/', 1)[-1].split('.')[-1]


def reference_module(name):
  """The module part a reference ``@scope/pkg.mod.C`` gives: ``'pkg.mod'``
  (``''`` for ``@C``)."""
  parts = name.rsplit('/', 1)[-1].split('.')
  return '.'.join(parts[:-1])


def module_matches(rel, module):
  """Whether a file (``rel``, a path in the tree) can be the module a
  reference names (``module``: its trailing dotted components, as gin
  matches a partly qualified name)."""
  path = rel[:-3] if rel.endswith('.py') else rel
  dotted = path.replace('/', '.')
  if dotted.endswith('.__init__'):
    dotted = dotted[:-len('.__init__')]
  return ('.' + dotted).endswith('.' + module)


def statements(text):
  """``(lhs, value text)`` of each binding or macro in a config text
  (``import`` / ``include`` lines and comments left out)."""
  out = []
  lines = text.splitlines()
  i = 0
  while i < len(lines):
    line = _strip_comment(lines[i])
    i += 1
    m = _BINDING.match(line)
    if not m:
      continue
    lhs, value = m.group(1), m.group(2)
    depth = _depth(value)
    while depth > 0 and i < len(lines):
      more = _strip_comment(lines[i])
      i += 1
      value += '\n' + more
      depth += _depth(more)
    out.append((lhs, value.strip()))
  return out


def value_parts(value):
  """What a binding's value text refers to: ``(references, macros,
  literal)`` -- references as ``(name, called, module)``, macro names, and whether
  anything else (a literal) is in it."""
  refs = [(configurable_name(n), bool(c), reference_module(n))
          for n, c in _REFERENCE.findall(value)]
  macros = _MACRO.findall(value)
  rest = _MACRO.sub('', _REFERENCE.sub('', value)).strip(' \n[](),')
  return refs, macros, bool(rest) or not (refs or macros)


def name_prefix(node_text):
  """For a binding name built at run time (``'C.%s' % k``,
  ``f'C.{k}'``): the configurable it names when its literal head says
  ``C.`` (the parameter not known), else None."""
  m = re.match(r"""^[rbuf]*['"]([\w./]*?)([\w]+)\.(%s|\{)""", node_text)
  if m:
    return m.group(2)
  return None


def _strip_comment(line):
  # (a '#' inside a string literal is rare in configs: cut at the first)
  quote = None
  for i, ch in enumerate(line):
    if quote:
      if ch == quote:
        quote = None
    elif ch in '\'"':
      quote = ch
    elif ch == '#':
      return line[:i]
  return line


def _depth(text):
  d = 0
  quote = None
  for ch in text:
    if quote:
      if ch == quote:
        quote = None
    elif ch in '\'"':
      quote = ch
    elif ch in '([{':
      d += 1
    elif ch in ')]}':
      d -= 1
  return d
