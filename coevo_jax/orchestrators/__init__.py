"""Test-time co-evolving orchestrators (EvoChamber, FlyRoute) over a text-completion LLM."""
