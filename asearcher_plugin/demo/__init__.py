"""`asearcher demo`: a web page that runs the agent on a typed question and shows each turn as it happens.

`server` serves the page and streams over a WebSocket; `runs` drives the same `AgentExecutor` that training
and `asearcher eval` use, through its per-turn hook; `models` builds the engine a person picks; `replay`
reads the `trajectories.jsonl` lines `asearcher eval` writes (and the demo saves) back into turns.
"""
