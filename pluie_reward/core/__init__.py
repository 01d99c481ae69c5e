"""The judge's machinery: templates (prompts as data), binding a template to a tokenizer, the :class:`Judge`
and its config, the scoring plan, calibration and the result cache."""
