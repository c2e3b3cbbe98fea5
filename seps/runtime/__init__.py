"""The process and its machine: what a run needs from where it runs, and nothing else.

:mod:`.float_path` pins the CPU kernels, :mod:`.devices` and :mod:`.precision` choose the
device and the mixed precision, :mod:`.interrupts` turns SIGTERM into a safe stop,
:mod:`.machine_load` samples the load a run was timed under, :mod:`.faults` holds the
kill points only tests arm. The bottom layer: it imports no other part of ``seps``.
"""
