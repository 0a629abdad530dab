"""The run folder and the records written into it, below every executor that writes them.

``folder`` writes the folder atomically and under locks; ``scrub`` takes secrets out of what it holds.
"""
