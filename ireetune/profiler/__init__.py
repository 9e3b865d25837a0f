"""The dispatch profiler (`ireetune profile`): generate, compile, verify and profile dispatches."""
