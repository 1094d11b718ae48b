"""The performance model without TensorFlow: profiles, Agarwal et al.'s closed form,
Zhang et al.'s simulator and Espresso's planner."""
