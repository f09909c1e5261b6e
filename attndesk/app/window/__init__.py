"""The window: ``main_window`` assembles it (``MainWindow``, ``main()``) from its parts: ``tab_pages``
(the registry's tabs, their views, presenters and empty states, ``empty_state`` the page of a tab that
does not apply), ``docks``, ``actions`` (the menus' layout and the window's own actions, on
``widgets.menus``), ``status_bar``, ``sessions`` (session files and the settings kept between
launches), ``export`` (the export dialog, ``export_dialog``) and ``warmup`` (the tab pages not shown
yet, prepared while the window idles)."""
