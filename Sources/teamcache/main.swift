print("teamcache")
