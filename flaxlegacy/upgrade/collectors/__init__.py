"""Fact collectors: layer 2 of the upgrade (see cst_util.py for the layers).

facts.py runs them over every file and across the codebase; the rules
(rules/) read what they recorded and never collect facts themselves.  One
module per legacy concept, named as the rule that reads its facts:

* ``usage``: which parameters a legacy module uses as arrays (the field /
  call split), with the tables of legacy attention and recurrent cells it
  needs;
* ``aliases``: module-level partial aliases and values bound to
  hyper-parameters (rules/aliases.py);
* ``methods``: a module class's methods and the split through them
  (rules/methods.py);
* ``helpers``: shared-module calls (rules/helpers.py);
* ``subclasses``: subclasses of legacy layers and user modules
  (rules/subclasses.py);
* ``programs``: program-level facts -- models, optimizers, loss functions
  (rules/programs.py), with the optimizer tables;
* ``optimizer_defs``: which user ``OptimizerDef`` classes translate to
  optax, and their plan (rules/optimizer_defs.py emits it).

They import layer 1 and each other only.
"""
