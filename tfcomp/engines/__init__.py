"""What both engines (tfcomp.distribute and tfcomp.horovod) do alike: the start-up
checks that every worker runs the same exchange, the peer watch, and the steps
around the exchange."""
