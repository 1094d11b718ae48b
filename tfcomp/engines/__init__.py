"""What both engines (tfcomp.distribute and tfcomp.horovod) do alike, written once:
engine.Engine (the start-up checks that every worker runs the same exchange, the
peer watch, a controller's Workers, and the per-step steps around the exchange),
agreement (what the workers compare and share) and peers (the peer watch)."""
