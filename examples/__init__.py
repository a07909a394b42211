"""Examples of Antre in other frameworks (tested in ``tests/integrations/``; not shipped in
the wheel)."""
