"""Fetching the buildpacks a group names into staging, in floors that import only downwards:

- :mod:`.transport`: the HTTP client, redirects, timeouts and the one retry rule (its session :mod:`.sessions`, the
  run's time :mod:`.clock`);
- :mod:`.streams`, :mod:`.extract`, :mod:`.tree`: hashing and bounded readers, safe tar extraction, copying,
  linking and installing buildpack trees;
- :mod:`.store`: where fetched bytes are kept and found again, by kind, through its tiers (:mod:`.cache`, this
  pod's download cache; :mod:`.fleet`, the fleet's repository);
- the sources, each a :class:`~preparer.fetch.base.Fetcher` for one kind of locator: :mod:`.local`, :mod:`.http`,
  :mod:`.inline`, :mod:`.oci`; and :mod:`.sources`, which maps each kind of locator to its fetcher.

:mod:`.locator` (what a ``uri`` names) is pure and imports none of them.
"""
