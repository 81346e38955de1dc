"""Pictures: the data-flow diagrams of the chapters and the interactive attention explorer.
They may import anything below them (layers, tasks, analysis, models)."""
