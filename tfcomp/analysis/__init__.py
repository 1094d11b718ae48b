"""Will compression help? Agarwal et al.'s closed-form model (costs), Zhang et al.'s
what-if simulator (simulator) and the saved profile that feeds them (profile).

numpy and the standard library only: nothing here imports TensorFlow, so a
prediction from a saved profile runs anywhere.
"""
