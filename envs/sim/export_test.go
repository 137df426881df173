package sim

// ParseTrailer is parseTrailer, for the differential fuzz test.
var ParseTrailer = parseTrailer
