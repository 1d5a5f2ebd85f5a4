"""Scaling: the pure planner, its data (model), and the managers that apply plans to MIGs."""
