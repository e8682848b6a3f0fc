"""Bad-input fuzzing of every minigraph op (tests/test_fuzz.py, ``python -m tests.fuzz.run``).

* ``values``     deterministic arrays (shape, dtype, value kind, seed) and memory layouts;
* ``strategies`` hypothesis strategies: one recipe per op for valid-ish inputs, then mutations
                 (dtypes, shapes, values, attrs, feed modes, layouts) -> :class:`cases.Case`;
* ``cases``      the picklable case description, graph building and the repro snippet;
* ``runner``     forked workers: batches, per-case timeout (hang), crash attribution;
* ``checks``     outcomes -> findings (crash, hang, other exception, bad message, mismatch,
                 static shape/dtype, mutated feeds, lost variable values) and the summary.

Nothing here imports TensorFlow; the campaign runs in its own interpreter.
"""
