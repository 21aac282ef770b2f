"""Reading results back, without the trainer: tables, figures and the generated blocks of the docs.

* :mod:`.results`      a comparison's runs read back
* :mod:`.study`        a study's test records: tables, paired differences, curves
* :mod:`.study_plots`  a study's figures
* :mod:`.rates`        the rate study: speed measures, the speed ratio and what predicts it
* :mod:`.gradients`    the Gradient Share tables (audit runs, proxy check, probes)
* :mod:`.regime_choice` a regime chosen from probes by a committed rule
* :mod:`.comparison`   a comparison's results table, success by horizon, the channel picture
* :mod:`.markdown`     Markdown cells and tables
* :mod:`.docs`         the generated blocks of README.md and docs/results.md (``python -m skillgate_lib.report.docs``)
"""
