"""Helpers shared by test modules: data builders, inventories and page utilities (never tests)."""
