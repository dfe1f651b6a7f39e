"""A stand-in for the ``servelearnbench`` package, for tests on machines without it.

The real package needs Python >= 3.12 and is not on this machine's registry.
This one has the API mw's engine (a) uses, as read from the package's source
(``scenarios.get_bundle`` / ``n_windows``, ``agent.new_env`` / ``tool_specs``,
``protocol.stamp_serving`` / ``stamp_test``, ``engine.types.Action``, an Env
with ``reset`` / ``step`` / ``compute_reward`` and a 50-tool-call budget),
built over the real banking_l1 export. Its verifier is not the real one: a
task's reward is a fixed function of its id and of whether ``finish`` came, so
tests can tell the reward came from here. Every call is logged (one JSON line)
to the file named by ``FAKE_SLB_LOG``.
"""
