"""The search's strategies, one module each: a `harness.hunt.strategy.Strategy` subclass named by `[hunt] strategy`.

Every module here is imported when a hunt first asks for a strategy (`harness.hunt.strategy.strategies`), so adding
one is adding its module (and its name to `StrategyName`, which `validate` reads); nothing else lists them.
"""
