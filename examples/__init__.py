"""Examples of the merchant's own code: an action and an effect (actions.py), a shop (shop/)."""
