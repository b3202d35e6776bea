"""Model access: one adapter per provider family, chosen by the model id's prefix, behind one client each.

- :mod:`~delta_eval.adapters.base`: the adapter protocol (a canonical request in, a canonical response out);
- :mod:`~delta_eval.adapters.registry`: the dispatcher from prefix (``openai:``, ``simulated:``) to adapter factory,
  with plugins by registration or entry point;
- :mod:`~delta_eval.adapters.client`: a model behind the response cache, its limiter and retries;
- :mod:`~delta_eval.adapters.pool`: every client of a run, shared by both sides and the judges;
- :mod:`~delta_eval.adapters.limits`, :mod:`~delta_eval.adapters.retry`: adaptive concurrency, rate limits, backoff;
- :mod:`~delta_eval.adapters.simulated`: the ``simulated:`` model, answering from recorded conversations.

Adapters know nothing of judges or of the run folder.
"""
