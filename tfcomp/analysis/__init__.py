"""Will compression help? Agarwal et al.'s closed-form model (costs), Zhang et al.'s
what-if simulator (simulator) and the saved profile that feeds them (profile);
`python -m tfcomp.analysis predict|whatif` asks them from the command line (cli).

numpy and the standard library only (the command line adds absl, its plots
matplotlib): nothing here imports TensorFlow, so a prediction from a saved
profile runs anywhere.
"""
