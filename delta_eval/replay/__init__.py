"""Replaying recorded turns: replay points (one per assistant turn), applying a variant to a point's context, tool
simulation (tools never run live), and the engine that replays a turn through a model until it answers in text.
"""
