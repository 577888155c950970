// placeholder until the config reader lands
