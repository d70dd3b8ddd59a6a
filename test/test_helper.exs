# Fail the whole run at once, with the load error, if the NIF cannot be loaded.
Code.ensure_loaded!(RakNet.Native)

ExUnit.start()
