"""Provider plugins for spark-video render dispatch."""
