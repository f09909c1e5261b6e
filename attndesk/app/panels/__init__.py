"""The window's panels, one concern per module (tokens, parameters, heatmaps, timing)."""
