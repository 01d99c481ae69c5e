"""The ground layer, what every other layer uses: the package's exceptions (:mod:`.errors`), its one HTTP
client (:mod:`.http`) and a fingerprint of a model's weights (:mod:`.weights`). It imports nothing of the
package."""
