"""Research probes on a trained model: experiments that ask how the look-back works, not how fast it runs.

Each is a command, `python -m lab.probes.NAME` (quality, heads, readout, lookup, micro_copy, mhc_post,
far_copy), whose last line is `NAME: key=value ...`; evaluation.py holds the binding and retrieval probes that
quality.py prints. Performance benchmarks stay in bench/.
"""
