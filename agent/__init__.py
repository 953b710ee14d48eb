"""The minds: behavior plans, the realizer, scripted plans and the Director (slow thinking)."""
