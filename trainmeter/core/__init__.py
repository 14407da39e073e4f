"""Pure core: standard library only; imports nothing else of trainmeter."""
