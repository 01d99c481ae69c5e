"""The core: templates (prompts as data), binding a template to a tokenizer, the :class:`Judge` and its result cache."""
