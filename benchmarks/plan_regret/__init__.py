"""The planner's plans and tfcomp.Auto against every single compressor, measured:
`python -m benchmarks.plan_regret` (__main__.py); audit_report tables Auto's audits."""
