"""Performance engineering for CAM: one JSON row per configuration (:mod:`.row`), the per-rank straggler score
(:mod:`.straggler`), the history database with change points (:mod:`.history`, :mod:`.changepoint`), the
comparison of two runs (:mod:`.compare`) and the run's performance page (:mod:`.page`)."""
